"""Compare runs of several policies: rank them, accuracy at an equal time T, comparison.csv,
and the table (text and HTML share its cells and footnotes).

Runs are ranked by time to target (or by energy, egress cost or carbon to target: the
`objective`, report/objectives.py), then by the accuracy each held at one equal time T
(unknown for a run that stopped before T), so no run is credited for time it did not run.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powertrip.app.report import objectives as O
from powertrip.app.report.result import RunResult, as_float, csv_number

#: acc_at_t is the accuracy at the equal time t_s (the same T in every row, see
#: equal_time_s); covered_s is how far each run's accuracy is known (see covered_time_s).
COMPARISON_COLUMNS = (
    "policy",
    "time_to_target_s",
    "rounds",
    "final_accuracy",
    "best_accuracy",
    "sim_time_s",
    "reached",
    "acc_at_t",
    "t_s",
    "covered_s",
    "stopped_reason",
    *O.FOOTPRINT_COLUMNS,
)


def covered_time_s(run: RunResult) -> float:
    """How far into (simulated) time a run's accuracy is known. Normally its last round; when
    the time budget stopped it, up to the budget: the aggregator stops before a round that
    would end past the budget, so the run would have held its last model until then anyway."""
    covered = run.sim_time_s
    cap_h = as_float(run.config.get("max_sim_hours"))
    if run.summary.get("stopped_reason") == "time_budget" and cap_h == cap_h and cap_h > 0:
        covered = max(covered, cap_h * 3600)
    return covered


def equal_time_s(runs: Iterable[RunResult]) -> float | None:
    """T, the time at which runs are compared by accuracy: the earliest time to target among
    the runs that reached it (how far the winner needed), else the shortest time any run
    covered (usually the shared time budget), so that every run's accuracy at T is known."""
    runs = list(runs)
    reached = [r.time_to_target_s for r in runs if r.time_to_target_s is not None]
    if reached:
        return min(reached)
    covered = [covered_time_s(r) for r in runs]
    return min(covered) if covered else None


def accuracy_at_equal_time(run: RunResult, t_s: float) -> float | None:
    """The run's accuracy at T, or None when it stopped before T (cut off, round cap, failure)
    and so what it would have held at T is unknown. A run stopped by its time budget holds
    its last model until the budget; 0.0 when no round had finished by T."""
    if t_s > covered_time_s(run) + 1e-9:
        return None
    if not run.rounds:
        return 0.0
    last_s = float(run.rounds[-1]["sim_time_s"])
    return run.accuracy_at(min(t_s, last_s))


def comparison_rows(runs: Iterable[RunResult], objective: str = "time") -> list[dict[str, Any]]:
    """One row per run, best to target by `objective` first (fastest, by default), then by
    accuracy at the equal time T (`t_s`, the same in every row; see equal_time_s), runs
    without acc@T last."""
    runs = list(runs)
    t_s = equal_time_s(runs)
    rows = [
        {
            "policy": run.name,
            "time_to_target_s": run.time_to_target_s,
            "rounds": int(run.summary.get("rounds") or len(run.rounds)),
            "final_accuracy": as_float(run.summary.get("final_accuracy")),
            "best_accuracy": as_float(run.summary.get("best_accuracy")),
            "sim_time_s": run.sim_time_s,
            "reached": run.reached,
            "acc_at_t": None if t_s is None else accuracy_at_equal_time(run, t_s),
            "t_s": t_s,
            "covered_s": covered_time_s(run),
            "stopped_reason": str(run.summary.get("stopped_reason") or ""),
            **O.footprint_values(run),
        }
        for run in runs
    ]
    return sorted(rows, key=_ranking(objective))


def _ranking(objective: str):
    """The sort key: reached first, by the objective's value to target (a reached run
    without that value after those with one), then accuracy at T (unknown last), then best
    accuracy."""
    key = O.get_objective(objective).to_target

    def rank(row: dict[str, Any]) -> tuple:
        value = row.get(key) if row["time_to_target_s"] is not None else None
        acc = row.get("acc_at_t")
        best = row["best_accuracy"]
        return (
            row["time_to_target_s"] is None,
            value is None,
            0.0 if value is None else value,
            -acc if acc is not None and acc == acc else math.inf,
            -best if best == best else math.inf,
            row["policy"],
        )

    return rank


def write_comparison(
    comp_dir: str | Path, runs: Sequence[RunResult], objective: str = "time"
) -> Path:
    """Write comparison.csv (sorted like comparison_rows; enough to rebuild format_table)."""
    out = Path(comp_dir) / "comparison.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COMPARISON_COLUMNS)
        for row in comparison_rows(runs, objective):
            writer.writerow(
                [
                    row["policy"],
                    csv_number(row["time_to_target_s"]),
                    row["rounds"],
                    csv_number(row["final_accuracy"]),
                    csv_number(row["best_accuracy"]),
                    csv_number(row["sim_time_s"]),
                    "true" if row["reached"] else "false",
                    csv_number(row["acc_at_t"]),
                    csv_number(row["t_s"]),
                    csv_number(row["covered_s"]),
                    row["stopped_reason"],
                    *(csv_number(row[key]) for key in O.FOOTPRINT_COLUMNS),
                ]
            )
    return out


def _optional(value: Any) -> float | None:
    number = as_float(value)
    return None if number != number else number


def _normalise_all(
    rows: Iterable[RunResult | dict[str, Any]], objective: str = "time"
) -> list[dict[str, Any]]:
    """Accept RunResults, comparison_rows() output or rows read back from comparison.csv
    (older files lack the acc@T and footprint columns: those show as unknown)."""
    rows = list(rows)
    results = [r for r in rows if isinstance(r, RunResult)]
    if results and len(results) != len(rows):
        raise TypeError("give either RunResults or table rows, not a mix")
    if results:
        return comparison_rows(results, objective)  # T: a property of the whole set of runs
    out = []
    for row in rows:
        ttt = _optional(row.get("time_to_target_s"))
        sim = as_float(row.get("sim_time_s"))
        covered = _optional(row.get("covered_s"))
        out.append(
            {
                "policy": str(row.get("policy", "")),
                "time_to_target_s": ttt,
                "rounds": int(float(row.get("rounds") or 0)),
                "final_accuracy": as_float(row.get("final_accuracy")),
                "best_accuracy": as_float(row.get("best_accuracy")),
                "sim_time_s": sim,
                "reached": ttt is not None,
                "acc_at_t": _optional(row.get("acc_at_t")),
                "t_s": _optional(row.get("t_s")),
                "covered_s": sim if covered is None else covered,
                "stopped_reason": str(row.get("stopped_reason") or ""),
                **{key: _optional(row.get(key)) for key in O.FOOTPRINT_COLUMNS},
            }
        )
    return sorted(out, key=_ranking(objective))


def time_to_target_text(ttt_s: float | None, sim_time_s: float) -> str:
    """'1.234' hours, or 'not reached (> X h)' with how long the run went on."""
    if ttt_s is not None:
        return f"{ttt_s / 3600:.3f}"
    if sim_time_s != sim_time_s:
        return "not reached"
    return f"not reached (> {sim_time_s / 3600:.3f} h)"


@dataclass
class ComparisonTable:
    """Headers, cells and footnotes shared by the text and HTML comparison tables."""

    headers: list[str]
    cells: list[list[str]]
    notes: list[str]
    #: which columns hold numbers (right-aligned in text)
    numeric: list[bool]


#: the footprint's table headers, in FOOTPRINT order
FOOTPRINT_HEADERS = ("kWh to target", "egress $ to target", "kg CO2 to target")


def comparison_table_parts(
    rows: Iterable[RunResult | dict[str, Any]], objective: str = "time"
) -> ComparisonTable:
    """The comparison as cells plus the footnotes that say what T is and why a cell is '-'.
    Energy, egress cost and carbon to target are columns when any run has them."""
    given = list(rows)
    norm = _normalise_all(given, objective)
    t_s = next((r["t_s"] for r in norm if r["t_s"] is not None), None)
    acc_header = "acc@T" if t_s is None else f"acc@T={t_s / 3600:.3f}h"
    headers = ["policy", "time to target (h)", acc_header, "rounds", "final acc", "best acc"]
    footprint = O.has_footprint(norm)
    cells = [
        [
            row["policy"],
            time_to_target_text(row["time_to_target_s"], row["covered_s"]),
            "-" if row["acc_at_t"] is None else _pct(row["acc_at_t"]),
            str(row["rounds"]),
            _pct(row["final_accuracy"]),
            _pct(row["best_accuracy"]),
            *(O.cell(row, O.RANKINGS[name]) for name in O.FOOTPRINT if footprint),
        ]
        for row in norm
    ]
    notes = _table_notes(norm, t_s)
    if footprint:
        headers += FOOTPRINT_HEADERS
        runs = [r for r in given if isinstance(r, RunResult)]
        notes.append(O.pricing_note(runs))
    if objective != "time":
        what = O.get_objective(objective).what
        notes.append(f"Ranked by {what} to target (runs that reached it first).")
    numeric = [False, False, True, True, True, True] + [True] * (len(headers) - 6)
    return ComparisonTable(headers, cells, notes, numeric)


def _table_notes(rows: list[dict[str, Any]], t_s: float | None) -> list[str]:
    if t_s is None:
        if rows:
            return ["acc@T: unknown (comparison.csv predates accuracy at equal time)."]
        return []
    winners = [r["policy"] for r in rows if r["time_to_target_s"] == t_s]
    if winners:
        why = f"the earliest time to target ({', '.join(winners)})"
    else:
        why = "the shortest time every run covered, as no policy reached the target"
    notes = [f"acc@T: the accuracy each policy held at T = {t_s / 3600:.3f} h, {why}."]
    early = [
        f"{r['policy']} at {r['sim_time_s'] / 3600:.3f} h ({r['stopped_reason'] or 'stopped'})"
        for r in rows
        if r["acc_at_t"] is None
    ]
    if early:
        notes.append(
            "acc@T '-': the run stopped before T, so its accuracy at T is unknown: "
            + "; ".join(early)
            + "."
        )
    if any(r["acc_at_t"] == 0.0 for r in rows):
        notes.append("0.0000 at T: the run had not finished a round by T.")
    return notes


def table_cells(
    rows: Iterable[RunResult | dict[str, Any]], objective: str = "time"
) -> tuple[list[str], list[list[str]]]:
    """Headers and formatted cells shared by the text and HTML tables (no footnotes)."""
    parts = comparison_table_parts(rows, objective)
    return parts.headers, parts.cells


def _pct(value: float) -> str:
    return "-" if value != value else f"{value:.4f}"


def format_table(rows: Iterable[RunResult | dict[str, Any]], objective: str = "time") -> str:
    """A fixed-width text table of a comparison, best by `objective` first (fastest by
    default), with its footnotes below."""
    parts = comparison_table_parts(rows, objective)
    headers, cells = parts.headers, parts.cells
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]

    def line(values: list[str]) -> str:
        cols = [
            v.rjust(w) if right else v.ljust(w)
            for v, w, right in zip(values, widths, parts.numeric, strict=True)
        ]
        return "  ".join(cols).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(c) for c in cells), *parts.notes])
