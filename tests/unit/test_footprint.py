"""Energy, egress cost and carbon (powertrip/core/footprint.py) against numbers worked out by
hand, the settings that price them, and finished runs stored before they existed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from powertrip.app.experiments.plan import is_done
from powertrip.core import footprint as F
from powertrip.core.config import LATER_SETTINGS, ConfigError, RunConfig, experiment_differences
from services.aggregator.report import footprint_summary
from services.aggregator.run_result import LoopResult

REPO = Path(__file__).resolve().parents[2]
SPEC = F.FootprintSpec(gpu_power_w=250.0, gpu_idle_power_w=50.0, egress_usd_per_gb=0.02,
                       carbon_g_per_kwh=481.0)  # fmt: skip


def test_one_site_by_hand():
    # 16 effective GPUs (p = 0.5 of 32) compute 30 s of a round held 50 s; 1.5 GB moved
    site = F.site_footprint(F.SiteUse("site-000", 16.0, 30.0, 50.0, 1.5e9), SPEC)
    assert site.active_j == pytest.approx(16 * 250 * 30)  # 120,000 J
    assert site.idle_j == pytest.approx(16 * 50 * 20)  # 16,000 J
    assert site.energy_j == pytest.approx(136_000.0)
    assert site.egress_gb == pytest.approx(1.5)
    assert site.egress_usd == pytest.approx(0.03)
    assert site.carbon_g == pytest.approx(136_000 / 3.6e6 * 481)  # 18.171 g


def test_a_round_sums_its_sites_and_nvml_replaces_the_model():
    uses = [
        F.SiteUse("site-000", 16.0, 30.0, 50.0, 1.5e9),  # 120,000 + 16,000 J
        F.SiteUse("site-001", 32.0, 15.0, 50.0, 1.5e9),  # 120,000 + 56,000 J
    ]
    r = F.round_footprint(uses, SPEC)
    assert r.energy_j == pytest.approx(312_000.0)
    assert r.idle_energy_j == pytest.approx(72_000.0)
    assert (r.egress_gb, r.egress_usd) == (pytest.approx(3.0), pytest.approx(0.06))
    assert r.carbon_g == pytest.approx(312_000 / 3.6e6 * 481)  # 41.687 g
    measured = F.SiteUse("site-000", 16.0, 30.0, 50.0, 0.0, measured_energy_j=90_000.0)
    assert F.site_footprint(measured, SPEC).energy_j == pytest.approx(90_000 + 16_000)
    # a site that is the straggler waits for nobody: no idle energy beyond its own transfer
    assert F.site_footprint(F.SiteUse("s", 1.0, 50.0, 50.0, 0.0), SPEC).idle_j == 0.0


def test_a_carbon_trace_prices_each_site_at_the_rounds_time(tmp_path):
    trace = tmp_path / "carbon.csv"
    trace.write_text("site_id,hour,g_per_kwh\nsite-000,0,100\nsite-000,2,300\nsite-001,1,50\n")
    spec = F.FootprintSpec(carbon_trace=F.load_carbon_trace(trace))
    use = F.SiteUse("site-000", 1.0, 3600.0, 3600.0, 0.0)  # 250 Wh = 0.25 kWh
    assert F.site_footprint(use, spec, t_s=0).carbon_g == pytest.approx(25.0)
    assert F.site_footprint(use, spec, t_s=2.5 * 3600).carbon_g == pytest.approx(75.0)
    other = F.SiteUse("site-001", 1.0, 3600.0, 3600.0, 0.0)
    assert F.site_footprint(other, spec, t_s=0).carbon_g == pytest.approx(12.5)  # before hour 1
    unlisted = F.SiteUse("site-009", 1.0, 3600.0, 3600.0, 0.0)
    assert F.site_footprint(unlisted, spec).carbon_g == pytest.approx(0.25 * 481)
    trace.write_text("site_id,g_per_kwh\nsite-000,-3\n")
    with pytest.raises(F.FootprintError, match="line 2"):
        F.load_carbon_trace(trace)


def test_totals_in_summary_units_and_to_target():
    totals = F.FootprintTotals()
    totals.add(F.RoundFootprint(3.6e6, 3.6e5, 3.0, 0.06, 481.0))
    assert totals.summary() == {
        "energy_kwh": 1.0,
        "idle_energy_kwh": 0.1,
        "egress_gb": 3.0,
        "egress_usd": 0.06,
        "carbon_kg": 0.481,
    }
    result = LoopResult(footprint=totals, footprint_at_target=totals.summary())
    again = LoopResult.from_json(json.loads(json.dumps(result.to_json())))
    summary = footprint_summary(RunConfig(), again)
    assert summary["energy_kwh"] == 1.0 and summary["energy_to_target_kwh"] == 1.0
    assert summary["carbon_kg_to_target"] == 0.481 and summary["egress_usd_to_target"] == 0.06
    assert summary["footprint"]["egress_usd_per_gb"] == F.EGRESS_USD_PER_GB
    # a checkpoint written before the accounting: earlier rounds uncounted, totals unknown
    old = {k: v for k, v in LoopResult().to_json().items() if not k.startswith("footprint")}
    unknown = footprint_summary(RunConfig(), LoopResult.from_json(old))
    assert unknown["energy_kwh"] is None and unknown["energy_to_target_kwh"] is None


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"gpu_power_w": 0}, "gpu_power_w: must be > 0"),
        ({"gpu_idle_power_w": 300}, "gpu_idle_power_w: must be in [0, gpu_power_w=250]"),
        ({"egress_usd_per_gb": -1}, "egress_usd_per_gb: must be >= 0"),
        ({"carbon_g_per_kwh": -1}, "carbon_g_per_kwh: must be >= 0"),
        ({"carbon_trace": "/no/such/file.csv"}, "carbon_trace: cannot read carbon trace"),
    ],
)
def test_bad_settings_name_the_field(setting, message):
    with pytest.raises(ConfigError) as err:
        RunConfig.from_mapping(setting).validate()
    assert message in str(err.value)


def test_the_defaults_are_the_documented_ones():
    config = RunConfig()
    assert (config.gpu_power_w, config.gpu_idle_power_w) == (250.0, 50.0)
    assert (config.egress_usd_per_gb, config.carbon_g_per_kwh) == (0.02, 481.0)
    assert config.carbon_trace is None


def test_a_stored_config_without_the_footprint_keys_counts_as_the_defaults(tmp_path):
    config = RunConfig(workload="synthetic", num_sites=10)
    stored = {k: v for k, v in config.to_dict().items() if k not in F.SETTINGS}
    assert experiment_differences(stored, config.to_dict()) == []
    priced = RunConfig(**{**config.to_dict(), "egress_usd_per_gb": 0.09})
    assert experiment_differences(stored, priced.to_dict()) == ["egress_usd_per_gb"]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run-config.yaml").write_text(yaml.safe_dump(stored, sort_keys=False))
    (run_dir / "summary.json").write_text(json.dumps({"status": "done"}))
    assert is_done(run_dir, config)
    assert not is_done(run_dir, priced)


def test_the_committed_reproduce_runs_stay_done():
    """results/reproduce/ holds finished runs, most written before the footprint existed:
    each is still "done" for the configuration it was run with, and would be without the
    footprint settings (as the earlier ones were stored). Runs in progress are left out."""
    finished = [
        file
        for file in sorted((REPO / "results" / "reproduce" / "runs").glob("*/*/*/run-config.yaml"))
        if _status(file.parent / "summary.json") == "done"
    ]
    if not finished:
        pytest.skip("no committed reproduce runs in this checkout")
    for file in finished:
        stored = yaml.safe_load(file.read_text())
        # what it ran with: a setting added since is what its absence meant then
        ran_with = RunConfig.from_mapping({**LATER_SETTINGS, **stored})
        assert is_done(file.parent, ran_with), file
        before = {k: v for k, v in stored.items() if k not in F.SETTINGS}
        wanted = ran_with.to_dict()
        assert not experiment_differences(before, wanted, also=("max_sim_hours",)), file


def _status(path: Path) -> str:
    try:
        return str(json.loads(path.read_text()).get("status"))
    except (OSError, ValueError):
        return "missing"


# ---- what the aggregator charges on each clock (services/aggregator/accounting.py) -------
def test_the_simulated_clock_charges_the_time_models_round():
    from powertrip.core.timemodel import RoundTime, SiteTime
    from services.aggregator.accounting import Accounting
    from services.aggregator.clock import ModelRound
    from services.aggregator.domain import CENTRALIZED, Selection, SiteProfile

    run = RunConfig(update_size_gb=1.5, comm_directions=2, gpus_per_site=32, delta_encoding="fp32")
    times = [SiteTime("site-000", 30.0, 10.0), SiteTime("site-001", 15.0, 35.0)]
    planned = ModelRound(51.0, RoundTime(51.0, 15.0, 35.0, 5.0, "site-001", 1.0), times, {})
    profiles = {
        "site-000": SiteProfile(site_id="site-000", power_fraction=0.5, gpus_available=32),
        "site-001": SiteProfile(site_id="site-001", power_fraction=1.0),
    }  # fmt: skip
    selection = Selection(site_ids=("site-000", "site-001"))
    uses = Accounting(run).simulated_uses(selection, planned, profiles)
    # held until the straggler finished (51 s less 1 s of aggregation); 2 x 1.5 GB each
    assert uses == [
        F.SiteUse("site-000", 16.0, 30.0, 50.0, 3e9),
        F.SiteUse("site-001", 32.0, 15.0, 50.0, 3e9),  # no gpus_available: the run's 32
    ]
    central = Selection(site_ids=("site-000",), mode=CENTRALIZED, power_cap=0.25)
    solo = ModelRound(61.0, RoundTime(61.0, 60.0, 0.0, 0.0, "site-000", 1.0),
                      [SiteTime("site-000", 60.0, 0.0)], {})  # fmt: skip
    assert Accounting(run).simulated_uses(central, solo, profiles) == [
        F.SiteUse("site-000", 8.0, 60.0, 60.0, 0.0)  # 25 % of 32 GPUs, no link crossed
    ]


def test_the_wall_clock_charges_what_was_measured():
    from services.aggregator.accounting import Accounting
    from services.aggregator.domain import Selection, SiteProfile
    from services.aggregator.round import RoundInProgress

    progress = RoundInProgress(round=1, model_version=0, tasks={}, fedavg=None)
    progress.started_at = 100.0
    progress.finished_at = {"site-000": 110.0, "site-001": 130.0}
    progress.compute_wall_s = {"site-000": 6.0, "site-001": 20.0}
    progress.energy_j = {"site-001": 4_000.0}  # NVML on site-001's worker
    profiles = {s: SiteProfile(site_id=s, power_fraction=0.5, gpus_available=4)
                for s in ("site-000", "site-001", "site-002")}  # fmt: skip
    selection = Selection(site_ids=("site-000", "site-001", "site-002"))
    uses = Accounting(RunConfig(clock="wall")).measured_uses(selection, progress, profiles, 10)
    assert uses == [  # site-002 missed the deadline: nothing measured, not charged
        F.SiteUse("site-000", 2.0, 6.0, 30.0, 20.0),
        F.SiteUse("site-001", 2.0, 20.0, 30.0, 20.0, measured_energy_j=4_000.0),
    ]
    r = F.round_footprint(uses, F.FootprintSpec())
    # 2 GPUs x 250 W x 6 s + NVML's 4,000 J, idle 2 x 50 W x (24 + 10) s
    assert r.energy_j == pytest.approx(3_000 + 4_000 + 3_400)
