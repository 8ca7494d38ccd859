"""A static-k sweep: one row per k, k* (the fastest k to the target) and sweep.csv."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from powertrip.app.report.result import ReportError, RunResult, as_float, csv_number

SWEEP_COLUMNS = ("k", "time_to_target_s", "rounds", "final_accuracy", "reached")


def sweep_rows(runs: Sequence[RunResult], ks: Sequence[int]) -> list[dict[str, Any]]:
    """One row per k, in increasing k."""
    if len(runs) != len(ks):
        raise ReportError(f"sweep: {len(runs)} runs but {len(ks)} k values")
    rows = [
        {
            "k": int(k),
            "time_to_target_s": run.time_to_target_s,
            "rounds": int(run.summary.get("rounds") or len(run.rounds)),
            "final_accuracy": as_float(run.summary.get("final_accuracy")),
            "sim_time_s": run.sim_time_s,
            "reached": run.reached,
        }
        for run, k in zip(runs, ks, strict=True)
    ]
    return sorted(rows, key=lambda r: r["k"])


def best_k(runs: Sequence[RunResult], ks: Sequence[int]) -> int | None:
    """k*: the k with the shortest time to target (smaller k on ties); None if none reached."""
    reached = [r for r in sweep_rows(runs, ks) if r["reached"]]
    if not reached:
        return None
    return min(reached, key=lambda r: (r["time_to_target_s"], r["k"]))["k"]


def write_sweep(sweep_dir: str | Path, runs: Sequence[RunResult], ks: Sequence[int]) -> Path:
    """Write sweep.csv, one row per k."""
    out = Path(sweep_dir) / "sweep.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(SWEEP_COLUMNS)
        for row in sweep_rows(runs, ks):
            writer.writerow(
                [
                    row["k"],
                    csv_number(row["time_to_target_s"]),
                    row["rounds"],
                    csv_number(row["final_accuracy"]),
                    "true" if row["reached"] else "false",
                ]
            )
    return out
