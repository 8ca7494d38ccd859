"""What the report reads from a run directory: config.yaml (or run-config.yaml), rounds.csv
and summary.json, and how run, comparison and sweep directories are recognised.

The files are written by the aggregator (and the driver); a report is often rendered long
after the run, so every error names the file (and the column or key) that is missing or
malformed.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from powertrip.app.report.result import ReportError, RunResult
from powertrip.core import runfiles

# what the report requires of a run directory is the run directory schema's
from powertrip.core.runfiles import CONFIG_FILES, REQUIRED_ROUND_COLUMNS, SUMMARY_KEYS

_INT_COLUMNS = frozenset({"round", "k", "bytes_up", "bytes_down"})
_TEXT_COLUMNS = frozenset({"sites", "straggler", "mode", "clock"})


_K_DIR = re.compile(r"^k(\d+)$")


def load_run(run_dir: str | Path, label: str = "") -> RunResult:
    """Read config.yaml, rounds.csv and summary.json of one run directory."""
    path = Path(run_dir)
    if not path.is_dir():
        raise ReportError(f"{path}: not a directory (expected a run directory)")
    return RunResult(
        path=path,
        config=read_config(path),
        rounds=read_rounds(path / runfiles.ROUNDS),
        summary=read_summary(path / runfiles.SUMMARY),
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
    shared = file.parent.parent / runfiles.SHARED_SITES
    if "sites" not in data and shared.is_file():  # a reproduction's runs share one table
        try:
            data["sites"] = json.loads(shared.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ReportError(f"{shared}: cannot read the shared site table: {exc}") from exc
        file = shared
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
            missing = [c for c in REQUIRED_ROUND_COLUMNS if c not in header]
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
        elif key in _TEXT_COLUMNS or (
            key not in REQUIRED_ROUND_COLUMNS and not _looks_numeric(text)
        ):
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
    return (path / runfiles.ROUNDS).is_file()


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
