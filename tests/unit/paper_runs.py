"""Hand-made runs in memory for the tests of reproduction.paper (test_paper_*.py): a run
with its rounds, and a set-up whose arms took given times to target (no training)."""

from __future__ import annotations

from pathlib import Path

from powertrip.app.report.result import RunResult
from reproduction.paper.data import VariantData, kstar


def _run(
    policy: str,
    ttt_h: float | None,
    sim_h: float,
    k: int = 5,
    rounds: list[tuple[float, float, int]] | None = None,
) -> RunResult:
    """A run in memory; rounds as (sim hours, accuracy, k), default one round at sim_h."""
    summary = {
        "policy": policy,
        "time_to_target_s": None if ttt_h is None else ttt_h * 3600,
        "sim_time_s": sim_h * 3600,
        "status": "done",
    }
    rows = [
        {"round": i, "k": kk, "sim_time_s": h * 3600, "round_time_s": 0.0, "accuracy": acc}
        for i, (h, acc, kk) in enumerate(rounds or [(sim_h, 0.5, k)], 1)
    ]
    return RunResult(Path(policy), {"num_sites": 100}, rows, summary)


def _variant(times: dict[str, list[float | None]], sweep=(10, 20, 70)) -> VariantData:
    v = VariantData("uniform", "uniform", list(times), seeds=[0, 1, 2], sweep=list(sweep))
    for arm, values in times.items():
        v.runs[arm] = {s: _run(arm, t, t or 9.0) for s, t in enumerate(values)}
    v.grid = list(sweep)
    v.kstar = kstar(v)
    return v
