"""Load and soak (run by `make reliability`; figures go to runs/reliability/*.json).

* load: 1,000 virtual sites registered and long-polling, 100 uploading per round, 20
  rounds: every round completes, every upload is accepted, the health check keeps
  answering (latency reported) and the aggregator's memory stays bounded.
* soak: 200 rounds with real site-worker processes: the aggregator's RSS and open fds
  grow by no more than 10 % between the warm-up window and the last rounds.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from powertrip.app.experiments.launcher import split_sites
from powertrip.core.config import RunConfig
from tests.reliability.load import Sampler, run_load

pytestmark = [pytest.mark.load, pytest.mark.slow]
OUT = Path(__file__).resolve().parents[2] / "runs" / "reliability"


def test_load_1000_sites_100_uploading(tmp_path):
    result = run_load(OUT / "load", sites=1000, k=100, rounds=20)
    print(json.dumps(result, indent=2))
    assert result["rounds"] == 20
    assert result["uploads"] == 20 * 100 and result["rejected"] == 0
    health = result["health_check_ms"]
    assert health["failed"] == 0 and health["n"] >= 10
    assert health["max"] < 5000  # responsive: never a 5 s stall, even on 2 shared cores
    agg = result["aggregator"]
    assert agg["rss_mb_peak"] < 1024  # bounded: well under 1 GiB with 1,000 parked polls
    assert agg["rss_mb_last"] <= 1.25 * agg["rss_mb_after_round_1"]


def test_soak_200_rounds_no_rss_or_fd_growth(service_factory, stack_factory, tmp_path):
    rounds = 200
    config = RunConfig(
        workload="synthetic", num_sites=20, max_rounds=rounds, seed=2, policy="random",
        policy_params={"k": 5.0}, target_accuracy=0.999, round_deadline_s=60,
    )  # fmt: skip
    path = tmp_path / "run.yaml"
    config.write_yaml(path)
    out = tmp_path / "run"
    _, _, aggregator = stack_factory(path, out, "--exit-when-done")
    for i, sites in enumerate(split_sites(20, 2)):
        service_factory(
            f"site_worker:{i}", "--aggregator", aggregator.target, "--sites", ",".join(sites),
            "--worker-id", f"w{i}", wait_serving=False,
        )  # fmt: skip
    rows = out / "rounds.csv"

    def current_round() -> int:
        try:
            return max(0, len(rows.read_text().splitlines()) - 1)
        except OSError:
            return 0

    sampler = Sampler(aggregator.process.pid, current_round, period_s=0.1)
    sampler.start()
    aggregator.process.wait(timeout=900)
    sampler.join()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done" and summary["rounds"] == rounds

    def window(lo, hi, key):
        values = [s[key] for s in sampler.samples if lo <= s["round"] < hi]
        assert len(values) >= 3, (lo, hi, len(values))
        return statistics.median(values)

    figures = {"rounds": rounds, "samples": len(sampler.samples)}
    for key in ("rss_kb", "fds", "threads"):
        start, end = window(20, 40, key), window(rounds - 20, rounds, key)
        figures[key] = {"rounds_20_40": start, "rounds_180_200": end, "growth": end / start - 1}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "soak.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    assert figures["rss_kb"]["growth"] <= 0.10, figures
    assert figures["fds"]["growth"] <= 0.10, figures
