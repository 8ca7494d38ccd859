"""Comparison and sweep tables: CSV files and a fixed-width text table for the terminal."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from powertrip.report.results import RunResult

COMPARISON_COLUMNS = (
    "policy",
    "time_to_target_s",
    "time_to_target_h",
    "rounds",
    "final_accuracy",
    "best_accuracy",
    "mean_k",
    "sim_time_s",
    "reached",
    "stopped_reason",
)


def ordered(runs: Sequence[RunResult]) -> list[RunResult]:
    """Reached first, fastest first; then the rest by best accuracy."""
    return sorted(
        runs,
        key=lambda r: (
            not r.reached,
            r.time_to_target_h or 0.0,
            -float(r.summary.get("best_accuracy", 0)),
        ),
    )


def comparison_rows(runs: Sequence[RunResult]) -> list[dict]:
    rows = []
    for run in ordered(runs):
        s = run.summary
        rows.append(
            {
                "policy": run.policy,
                "time_to_target_s": "" if not run.reached else f"{s['time_to_target_s']:.1f}",
                "time_to_target_h": "" if not run.reached else f"{run.time_to_target_h:.4f}",
                "rounds": s.get("rounds", len(run.sites)),
                "final_accuracy": f"{float(s.get('final_accuracy', 0)):.4f}",
                "best_accuracy": f"{float(s.get('best_accuracy', 0)):.4f}",
                "mean_k": f"{float(s.get('mean_k', 0)):.1f}",
                "sim_time_s": f"{float(s.get('sim_time_s', 0)):.1f}",
                "reached": run.reached,
                "stopped_reason": s.get("stopped_reason", ""),
            }
        )
    return rows


def write_comparison(comp_dir: str | Path, runs: Sequence[RunResult]) -> Path:
    path = Path(comp_dir) / "comparison.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COMPARISON_COLUMNS)
        writer.writeheader()
        writer.writerows(comparison_rows(runs))
    return path


def format_table(runs: Sequence[RunResult]) -> str:
    """The time-to-accuracy table as people read it in a terminal."""
    if not runs:
        return "(no runs)"
    target = runs[0].summary.get("target_accuracy")
    head = f"time to {float(target):.0%}" if target is not None else "time to target"
    lines = [
        f"{'policy':<16} {head:>22} {'rounds':>7} {'mean k':>7} {'final acc':>10} {'best acc':>9}"
    ]
    lines.append("-" * len(lines[0]))
    best = next((r.time_to_target_h for r in ordered(runs) if r.reached), None)
    for run in ordered(runs):
        s = run.summary
        if run.reached:
            ttt = f"{run.time_to_target_h:.3f} h"
            if best and run.time_to_target_h != best:
                ttt += f" ({run.time_to_target_h / best:.2f}x)"
        else:
            ttt = f"not reached (> {run.sim_time_h:.2f} h)"
        lines.append(
            f"{run.policy:<16} {ttt:>22} {s.get('rounds', 0):>7} {float(s.get('mean_k', 0)):>7.1f} "
            f"{float(s.get('final_accuracy', 0)):>10.4f} {float(s.get('best_accuracy', 0)):>9.4f}"
        )
    return "\n".join(lines)


def write_sweep(
    sweep_dir: str | Path, runs: Sequence[RunResult], ks: Sequence[int]
) -> tuple[Path, int | None]:
    """sweep.csv and k* (the k with the lowest time-to-target; None if none reached)."""
    path = Path(sweep_dir) / "sweep.csv"
    best_k, best_t = None, None
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["k", "time_to_target_s", "rounds", "final_accuracy", "reached"])
        for k, run in sorted(zip(ks, runs, strict=True)):
            ttt = run.summary.get("time_to_target_s")
            writer.writerow(
                [
                    k,
                    "" if ttt is None else f"{ttt:.1f}",
                    run.summary.get("rounds", 0),
                    f"{float(run.summary.get('final_accuracy', 0)):.4f}",
                    ttt is not None,
                ]
            )
            if ttt is not None and (best_t is None or ttt < best_t):
                best_k, best_t = k, ttt
    return path, best_k
