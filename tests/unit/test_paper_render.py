"""reproduction.paper's figures rendered from made-up run directories (Figs. 9 and 13, the
ablation, links-fig5's own sweep) and Fig. 5 from the population alone (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powertrip.app.report import claims as C
from reproduction.paper import (
    fig05,
    fig09,
)

# ---- rendering from run directories ------------------------------------------------------
#: three rounds that reach 45 % at 0.9 h (the other arms are cut off at 1.35 h)
ROUNDS_TO_0_9_H = [(0.5, 0.3, 2), (0.9, 0.46, 6), (1.3, 0.5, 8)]


def write_arms(
    out: Path,
    runs: dict[str, list[str]],
    seeds: list[int],
    rounds=tuple(ROUNDS_TO_0_9_H),
    max_sim_hours: float = 1.35,
) -> None:
    """Made-up finished runs, set-up -> arms, in every seed: PowerTrip reaches the target at
    the rounds' second time, every other arm is cut off."""
    from tests.unit.test_reproduce import write_run

    reached = rounds[1][0]
    for variant, arms in runs.items():
        for seed in seeds:
            for arm in arms:
                write_run(
                    out / "runs" / variant / f"seed{seed}" / arm,
                    arm,
                    reached if arm == "powertrip" else None,
                    list(rounds),
                    {"max_sim_hours": max_sim_hours},
                )


@pytest.mark.parametrize("figure", ["9", "13", "ablation"])
def test_a_figure_renders_from_made_up_run_directories(tmp_path, figure):
    from reproduction.paper.render import render_all
    from tests.unit.test_reproduce import made_up_sweep

    out = tmp_path
    seeds = [0, 1]
    made_up_sweep(out, "uniform", seeds, {2: 1.5, 5: 1.2})
    arms = ["powertrip", *(a for a in fig09.SUITE.arms if a not in ("sweep", "static-k*"))]
    others = {
        "ablation": [
            "two-directions",
            "data-parallel",
            "uniform-distances",
            "clock-estimator",
        ],
        "13": ["size-1gb", "size-2gb"],
    }.get(figure, [])
    elsewhere = ["powertrip", "static-k5"] + (["centralized-25"] if figure == "13" else [])
    write_arms(out, {"uniform": arms, **{v: elsewhere for v in others}}, seeds)
    meta = {"seeds": seeds, "sweep_k": [2, 5], "base_config": {"num_sites": 10}, "cores": 2}
    reports = render_all(out, [figure], meta)
    folder = figure if figure == "ablation" else f"fig{figure}"
    assert reports[figure] == out / folder / "report.html"
    html = reports[figure].read_text()
    assert "The paper" in html and "holds?" in html
    claims = C.read_claims_csv(out / folder / "claims.csv")
    assert claims and all(r["figure"] == figure for r in claims)
    summary = json.dumps(C.read_claims_csv(out / "claims.csv"))
    assert figure in summary
    if figure == "13":  # 1 and 2 GB read the 1.5 GB sweep's k* (static-k5), no n/a
        rows = {r["claim"]: r for r in claims}
        row = rows["at 2 GB PowerTrip is faster than static-k* (k* of the 1.5 GB sweep)"]
        assert row["holds"] != "n/a" and "not run" not in row["ours"]
        assert all(r["holds"] != "n/a" for r in claims), claims
    if figure == "ablation":
        assert "static-k* time (h), k = 5" in html
        assert "nothing (same settings as uniform)" in html  # the made-up runs flip nothing


def test_links_fig5_reads_its_own_sweep_to_30_percent_and_the_clock_row_uses_its_k_star(
    tmp_path,
):
    """links-fig5's sweep stops at 30 % of the sites: its seeds are complete without the
    larger k, a run past 30 % is not its k*, and links-fig5-clock compares with that k*."""
    from reproduction.paper.render import load_figure, render_all
    from tests.unit.test_reproduce import made_up_sweep

    seeds = [0, 1]
    made_up_sweep(tmp_path, "uniform", seeds, {2: 1.5, 3: 1.4, 5: 1.2, 10: 1.3})
    # k = 5 would win, but it is past 30 % of 10 sites: k* is 3
    made_up_sweep(tmp_path, "links-fig5", seeds, {2: 1.5, 3: 1.4, 5: 0.2})
    runs = {
        "uniform": ["powertrip"],
        "links-fig5": ["powertrip", "adaptive"],
        "links-fig5-clock": ["powertrip", "static-k3"],
    }
    write_arms(tmp_path, runs, seeds, [(0.5, 0.3, 2), (1.0, 0.46, 6), (1.5, 0.5, 8)], 2.0)
    meta = {"seeds": seeds, "sweep_k": [2, 3, 5, 10], "base_config": {"num_sites": 10}}
    data = load_figure(tmp_path, "ablation", meta)
    links = data["links-fig5"]
    assert links.grid == [2, 3] and links.seeds == seeds and links.kstar == 3
    assert data["links-fig5-clock"].arm("static-k@links-fig5*") == "static-k3"
    assert data["uniform"].kstar == 5  # the uniform sweep keeps its whole grid
    render_all(tmp_path, ["ablation"], meta)
    rows = {r["claim"]: r for r in C.read_claims_csv(tmp_path / "ablation" / "claims.csv")}
    own = rows["links-fig5: PowerTrip is faster than static k* (k = 3 from its own sweep)"]
    clock = rows[
        "links-fig5-clock: PowerTrip is faster than static k* (k = 3 from the links-fig5 sweep)"
    ]
    online = rows["links-fig5: adaptive is faster than static k* (k = 3 from its own sweep)"]
    assert own["holds"] != "n/a" and clock["holds"] != "n/a" and online["holds"] != "n/a"


def test_fig13_compares_every_baseline_it_has_and_waits_for_the_rest(tmp_path):
    """Fig. 13's later arms (Fig. 9's baselines at 1 and 2 GB) hold back none of the other
    claims: one finished in every complete seed is compared, one finished in some seeds
    only is left out (not run yet), one never run is 'not run'."""
    from reproduction.paper import fig13
    from reproduction.paper.render import load_figure, render_all
    from tests.unit.test_reproduce import made_up_sweep, write_run

    seeds = [0, 1]
    made_up_sweep(tmp_path, "uniform", seeds, {2: 1.5, 5: 1.2})
    runs = {
        "uniform": ["powertrip", "centralized-25"],
        "size-1gb": ["powertrip", "static-k5", "centralized-25", "highest-power"],
        "size-2gb": ["powertrip", "static-k5", "centralized-25"],
    }
    write_arms(tmp_path, runs, seeds)
    write_run(tmp_path / "runs/size-1gb/seed0/random", "random", 2.0, [(2.0, 0.5, 5)])
    meta = {"seeds": seeds, "sweep_k": [2, 5], "base_config": {"num_sites": 10}, "cores": 2}
    data = load_figure(tmp_path, "13", meta)
    small = data["size-1gb"]
    assert small.seeds == seeds  # the arms not run yet do not empty the complete seeds
    assert len(small.samples("highest-power")) == 2
    assert small.samples("random") == [] and small.samples("radius") == []
    times = fig13.times_of(small)
    assert list(times) == list(fig13.NAMES) and times["static-k*"] and not times["all"]
    render_all(tmp_path, ["13"], meta)
    rows = {r["claim"]: r for r in C.read_claims_csv(tmp_path / "fig13" / "claims.csv")}
    fastest = rows["powertrip is the fastest of 4 policies at 1 GB"]  # with highest-power
    assert fastest["holds"] != "n/a" and fastest["seeds"] == "2"
    assert rows["powertrip is the fastest of 3 policies at 2 GB"]["holds"] != "n/a"


@pytest.mark.parametrize("link_model", ["inverse", "fig5"])
def test_fig5_renders_from_the_population_alone(tmp_path, link_model):
    """No run directories: the figure, its table and claims come from the base config."""
    from powertrip.core.config import RunConfig
    from reproduction.paper.render import render_all

    base = RunConfig(link_model=link_model, update_size_gb=1.5).to_dict()
    meta = {"seeds": [0], "sweep_k": [], "base_config": base, "cores": 2}
    reports = render_all(tmp_path, ["5"], meta)
    assert reports["5"] == tmp_path / "fig5" / "report.html"
    png = tmp_path / "fig5" / "fig5_links.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = reports["5"].read_text()
    assert "fig5_links.png" in html and "Bandwidth and delay at sample distances" in html
    holds = {r["claim"]: r["holds"] for r in C.read_claims_csv(tmp_path / "fig5" / "claims.csv")}
    flat, inverse, nonlinear = (
        holds["bandwidth remains relatively constant within 1,000 miles (§5.3)"],
        holds['bandwidth is "inversely proportional to its distance" (§5.1)'],
        holds['the total delay "increases non-linearly with distance" (§5.1)'],
    )
    # each link model meets the paper's words its docstring claims, and says which it does not
    if link_model == "fig5":
        assert (flat, inverse, nonlinear) == ("yes", "no", "yes")
    else:
        assert (flat, inverse, nonlinear) == ("no", "yes", "no")
    # the table lists both models: 10 Gbit/s flat to 1,000 miles under fig5, 1 at 1,000 under
    # inverse
    rows = {r[0]: r for r in fig05.table({}, meta)[0].rows}
    assert rows["1,000"][1] == "1" and rows["1,000"][3] == "10" and rows["10,000"][3] == "1"
