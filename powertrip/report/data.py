"""Read finished run directories and turn them into comparison and sweep tables.

The files are written by the aggregator; a report is often rendered long after the run,
so every error names the file (and the column or key) that is missing or malformed.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

#: rounds.csv columns the report needs; any other column is kept but not required.
ROUND_COLUMNS: tuple[str, ...] = (
    "round",
    "sim_time_s",
    "round_time_s",
    "k",
    "sites",
    "accuracy",
    "loss",
    "compute_s",
    "comm_s",
    "wait_s",
    "predicted_round_time_s",
    "bytes_up",
    "bytes_down",
)
_INT_COLUMNS = frozenset({"round", "k", "bytes_up", "bytes_down"})
_TEXT_COLUMNS = frozenset({"sites", "straggler", "mode", "clock"})

SUMMARY_KEYS: tuple[str, ...] = (
    "policy",
    "workload",
    "clock",
    "rounds",
    "target_accuracy",
    "final_accuracy",
    "best_accuracy",
    "time_to_target_s",
    "sim_time_s",
    "stopped_reason",
)

#: config.yaml is what the aggregator writes; run-config.yaml is the driver's copy.
CONFIG_FILES = ("config.yaml", "run-config.yaml")

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
)
SWEEP_COLUMNS = ("k", "time_to_target_s", "rounds", "final_accuracy", "reached")

_K_DIR = re.compile(r"^k(\d+)$")


class ReportError(ValueError):
    """A run directory is missing a file or holds a malformed one; the message says which."""


@dataclass
class RunResult:
    """One finished run: its resolved config, per-round rows and summary."""

    path: Path
    config: dict[str, Any]
    rounds: list[dict[str, Any]]
    summary: dict[str, Any]
    #: display name in comparisons; empty means the policy name
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or str(self.summary.get("policy") or self.config.get("policy") or "")

    @property
    def time_to_target_s(self) -> float | None:
        value = self.summary.get("time_to_target_s")
        return None if value is None else float(value)

    @property
    def reached(self) -> bool:
        return self.time_to_target_s is not None

    @property
    def sim_time_s(self) -> float:
        value = self.summary.get("sim_time_s")
        if value is None and self.rounds:
            value = self.rounds[-1]["sim_time_s"]
        return float(value or 0.0)

    @property
    def target_accuracy(self) -> float | None:
        value = self.summary.get("target_accuracy", self.config.get("target_accuracy"))
        return None if value is None else float(value)

    @property
    def clock(self) -> str:
        return str(self.summary.get("clock") or self.config.get("clock") or "simulated")

    def column(self, name: str) -> np.ndarray:
        """One numeric rounds.csv column as floats (NaN where a row has no value)."""
        if self.rounds and name not in self.rounds[0]:
            raise ReportError(f"{self.path / 'rounds.csv'}: no column {name!r}")
        return np.array([_as_float(r.get(name)) for r in self.rounds], dtype=float)

    def has_column(self, name: str) -> bool:
        return bool(self.rounds) and name in self.rounds[0]

    def accuracy_at(self, t_s: float) -> float | None:
        """Accuracy of the model the run held at simulated time t_s (see accuracy_at_time)."""
        if not self.rounds:
            return None
        return accuracy_at_time(self.column("sim_time_s"), self.column("accuracy"), t_s)

    def selected_sites(self) -> dict[str, int]:
        """How many rounds each site was selected in."""
        counts: dict[str, int] = {}
        for row in self.rounds:
            for site in row["sites"]:
                counts[site] = counts.get(site, 0) + 1
        return counts


def accuracy_at_time(
    times_s: Sequence[float] | np.ndarray, accuracies: Sequence[float] | np.ndarray, t_s: float
) -> float | None:
    """The accuracy a run held at simulated time t_s: that of the last round finished by then
    (a step function; 0.0 before the first round ends). None when the run stopped before
    t_s, because what it would have held later is unknown; compare runs only at times that
    every one of them reached."""
    times = np.asarray(times_s, dtype=float)
    accs = np.asarray(accuracies, dtype=float)
    if len(times) == 0 or t_s > times[-1] + 1e-9:
        return None
    done = int(np.searchsorted(times, t_s + 1e-9, side="right"))
    return 0.0 if done == 0 else float(accs[done - 1])


def _as_float(value: Any) -> float:
    if value is None or value == "":
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


# ---- reading ---------------------------------------------------------------------------
def load_run(run_dir: str | Path, label: str = "") -> RunResult:
    """Read config.yaml, rounds.csv and summary.json of one run directory."""
    path = Path(run_dir)
    if not path.is_dir():
        raise ReportError(f"{path}: not a directory (expected a run directory)")
    return RunResult(
        path=path,
        config=read_config(path),
        rounds=read_rounds(path / "rounds.csv"),
        summary=read_summary(path / "summary.json"),
        label=label,
    )


def read_config(run_dir: Path) -> dict[str, Any]:
    """The resolved config as a plain mapping."""
    for name in CONFIG_FILES:
        file = run_dir / name
        if file.exists():
            break
    else:
        raise ReportError(f"{run_dir / CONFIG_FILES[0]}: file is missing (run not finished?)")
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ReportError(f"{file}: cannot read YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ReportError(f"{file}: expected a mapping of settings, got {type(data).__name__}")
    return data


def read_summary(file: Path) -> dict[str, Any]:
    """summary.json with the keys the report relies on checked."""
    if not file.exists():
        raise ReportError(f"{file}: file is missing (run not finished?)")
    try:
        data = json.loads(file.read_text())
    except OSError as exc:
        raise ReportError(f"{file}: cannot read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ReportError(f"{file}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc
    if not isinstance(data, dict):
        raise ReportError(f"{file}: expected a JSON object, got {type(data).__name__}")
    missing = [key for key in SUMMARY_KEYS if key not in data]
    if missing:
        raise ReportError(f"{file}: missing key(s) {', '.join(missing)}")
    sites = data.get("sites")
    if sites is not None:
        if not isinstance(sites, list):
            raise ReportError(f"{file}: 'sites' must be a list of site records")
        for i, site in enumerate(sites):
            need = ("site_id", "power_fraction", "distance_miles")
            if not isinstance(site, dict) or any(key not in site for key in need):
                raise ReportError(
                    f"{file}: sites[{i}] must have site_id, power_fraction and distance_miles"
                )
    return data


def read_rounds(file: Path) -> list[dict[str, Any]]:
    """rounds.csv as typed rows; 'sites' becomes a list of site ids."""
    if not file.exists():
        raise ReportError(f"{file}: file is missing (run not started or wrong directory?)")
    try:
        with file.open(newline="") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames
            if not header:
                raise ReportError(f"{file}: empty file (no header row)")
            missing = [c for c in ROUND_COLUMNS if c not in header]
            if missing:
                raise ReportError(
                    f"{file}: missing column(s) {', '.join(missing)} "
                    f"(header has: {', '.join(header)})"
                )
            return [_parse_row(file, reader.line_num, raw) for raw in reader]
    except OSError as exc:
        raise ReportError(f"{file}: cannot read: {exc}") from exc
    except csv.Error as exc:
        raise ReportError(f"{file}: malformed CSV: {exc}") from exc


def _parse_row(file: Path, line: int, raw: dict[str | None, Any]) -> dict[str, Any]:
    if None in raw:
        raise ReportError(f"{file}, line {line}: more values than header columns")
    row: dict[str, Any] = {}
    for key, text in raw.items():
        assert key is not None
        if text is None:
            raise ReportError(f"{file}, line {line}: no value for column {key!r}")
        if key == "sites":
            row[key] = [s for s in text.split(";") if s]
        elif key in _TEXT_COLUMNS or (key not in ROUND_COLUMNS and not _looks_numeric(text)):
            row[key] = text
        elif text.strip() == "":
            if key in ("round", "sim_time_s", "k"):
                raise ReportError(f"{file}, line {line}: column {key!r} is empty")
            row[key] = math.nan
        else:
            try:
                number = float(text)
            except ValueError:
                raise ReportError(
                    f"{file}, line {line}: column {key!r} has {text!r}, expected a number"
                ) from None
            if key in _INT_COLUMNS and number.is_integer():
                row[key] = int(number)
            else:
                row[key] = number
    return row


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ---- directory layout ------------------------------------------------------------------
def is_run_dir(path: Path) -> bool:
    return (path / "rounds.csv").is_file()


def run_subdirs(path: Path) -> list[Path]:
    """Subdirectories that hold a run (a rounds.csv), sorted by name."""
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if p.is_dir() and is_run_dir(p))


def sweep_subdirs(path: Path) -> list[tuple[int, Path]]:
    """(k, dir) for each k<N> run directory, sorted by k."""
    found = []
    for sub in run_subdirs(path):
        match = _K_DIR.match(sub.name)
        if match:
            found.append((int(match.group(1)), sub))
    return sorted(found)


# ---- comparison ------------------------------------------------------------------------
def covered_time_s(run: RunResult) -> float:
    """How far into (simulated) time a run's accuracy is known. Normally its last round; when
    the time budget stopped it, up to the budget: the aggregator stops before a round that
    would end past the budget, so the run would have held its last model until then anyway."""
    covered = run.sim_time_s
    cap_h = _as_float(run.config.get("max_sim_hours"))
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


def comparison_rows(runs: Iterable[RunResult]) -> list[dict[str, Any]]:
    """One row per run, fastest to target first, then by accuracy at the equal time T
    (`t_s`, the same in every row; see equal_time_s), runs without acc@T last."""
    runs = list(runs)
    t_s = equal_time_s(runs)
    rows = [
        {
            "policy": run.name,
            "time_to_target_s": run.time_to_target_s,
            "rounds": int(run.summary.get("rounds") or len(run.rounds)),
            "final_accuracy": _as_float(run.summary.get("final_accuracy")),
            "best_accuracy": _as_float(run.summary.get("best_accuracy")),
            "sim_time_s": run.sim_time_s,
            "reached": run.reached,
            "acc_at_t": None if t_s is None else accuracy_at_equal_time(run, t_s),
            "t_s": t_s,
            "covered_s": covered_time_s(run),
            "stopped_reason": str(run.summary.get("stopped_reason") or ""),
        }
        for run in runs
    ]
    return sorted(rows, key=_rank_key)


def _rank_key(row: dict[str, Any]) -> tuple:
    """Time to target (reached first), then accuracy at T (unknown last), then best accuracy."""
    ttt = row["time_to_target_s"]
    acc = row.get("acc_at_t")
    best = row["best_accuracy"]
    return (
        ttt is None,
        0.0 if ttt is None else ttt,
        -acc if acc is not None and acc == acc else math.inf,
        -best if best == best else math.inf,
        row["policy"],
    )


def write_comparison(comp_dir: str | Path, runs: Sequence[RunResult]) -> Path:
    """Write comparison.csv (sorted like comparison_rows; enough to rebuild format_table)."""
    out = Path(comp_dir) / "comparison.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COMPARISON_COLUMNS)
        for row in comparison_rows(runs):
            writer.writerow(
                [
                    row["policy"],
                    _num(row["time_to_target_s"]),
                    row["rounds"],
                    _num(row["final_accuracy"]),
                    _num(row["best_accuracy"]),
                    _num(row["sim_time_s"]),
                    "true" if row["reached"] else "false",
                    _num(row["acc_at_t"]),
                    _num(row["t_s"]),
                    _num(row["covered_s"]),
                    row["stopped_reason"],
                ]
            )
    return out


def _num(value: float | None) -> str:
    if value is None or value != value:
        return ""
    return repr(round(float(value), 6))


def _optional(value: Any) -> float | None:
    number = _as_float(value)
    return None if number != number else number


def _normalise_all(rows: Iterable[RunResult | dict[str, Any]]) -> list[dict[str, Any]]:
    """Accept RunResults, comparison_rows() output or rows read back from comparison.csv
    (older files lack the acc@T columns: their acc@T shows as unknown)."""
    rows = list(rows)
    results = [r for r in rows if isinstance(r, RunResult)]
    if results and len(results) != len(rows):
        raise TypeError("give either RunResults or table rows, not a mix")
    if results:
        return comparison_rows(results)  # T is a property of the whole set of runs
    out = []
    for row in rows:
        ttt = _optional(row.get("time_to_target_s"))
        sim = _as_float(row.get("sim_time_s"))
        covered = _optional(row.get("covered_s"))
        out.append(
            {
                "policy": str(row.get("policy", "")),
                "time_to_target_s": ttt,
                "rounds": int(float(row.get("rounds") or 0)),
                "final_accuracy": _as_float(row.get("final_accuracy")),
                "best_accuracy": _as_float(row.get("best_accuracy")),
                "sim_time_s": sim,
                "reached": ttt is not None,
                "acc_at_t": _optional(row.get("acc_at_t")),
                "t_s": _optional(row.get("t_s")),
                "covered_s": sim if covered is None else covered,
                "stopped_reason": str(row.get("stopped_reason") or ""),
            }
        )
    return sorted(out, key=_rank_key)


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


def comparison_table_parts(rows: Iterable[RunResult | dict[str, Any]]) -> ComparisonTable:
    """The comparison as cells plus the footnotes that say what T is and why a cell is '-'."""
    norm = _normalise_all(rows)
    t_s = next((r["t_s"] for r in norm if r["t_s"] is not None), None)
    acc_header = "acc@T" if t_s is None else f"acc@T={t_s / 3600:.3f}h"
    headers = ["policy", "time to target (h)", acc_header, "rounds", "final acc", "best acc"]
    cells = [
        [
            row["policy"],
            time_to_target_text(row["time_to_target_s"], row["covered_s"]),
            "-" if row["acc_at_t"] is None else _pct(row["acc_at_t"]),
            str(row["rounds"]),
            _pct(row["final_accuracy"]),
            _pct(row["best_accuracy"]),
        ]
        for row in norm
    ]
    return ComparisonTable(
        headers, cells, _table_notes(norm, t_s), [False, False, True, True, True, True]
    )


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


def table_cells(rows: Iterable[RunResult | dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Headers and formatted cells shared by the text and HTML tables (no footnotes)."""
    parts = comparison_table_parts(rows)
    return parts.headers, parts.cells


def _pct(value: float) -> str:
    return "-" if value != value else f"{value:.4f}"


def format_table(rows: Iterable[RunResult | dict[str, Any]]) -> str:
    """A fixed-width text table of a comparison, fastest first, with its footnotes below."""
    parts = comparison_table_parts(rows)
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


# ---- static-k sweep --------------------------------------------------------------------
def sweep_rows(runs: Sequence[RunResult], ks: Sequence[int]) -> list[dict[str, Any]]:
    """One row per k, in increasing k."""
    if len(runs) != len(ks):
        raise ReportError(f"sweep: {len(runs)} runs but {len(ks)} k values")
    rows = [
        {
            "k": int(k),
            "time_to_target_s": run.time_to_target_s,
            "rounds": int(run.summary.get("rounds") or len(run.rounds)),
            "final_accuracy": _as_float(run.summary.get("final_accuracy")),
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
                    _num(row["time_to_target_s"]),
                    row["rounds"],
                    _num(row["final_accuracy"]),
                    "true" if row["reached"] else "false",
                ]
            )
    return out
