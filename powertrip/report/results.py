"""Reading finished runs back: rounds.csv, summary.json, config.yaml, with clear errors."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

REQUIRED_COLUMNS = (
    "round",
    "sim_time_s",
    "round_time_s",
    "k",
    "sites",
    "accuracy",
    "loss",
    "compute_s",
    "comm_s",
    "predicted_round_time_s",
    "bytes_up",
    "bytes_down",
)
NUMERIC = (
    "round",
    "sim_time_s",
    "round_time_s",
    "k",
    "accuracy",
    "loss",
    "compute_s",
    "comm_s",
    "wait_s",
    "predicted_round_time_s",
    "bytes_up",
    "bytes_down",
)


class ReportError(ValueError):
    """A results file is missing or malformed; the message names the file and the field."""


@dataclass
class RunResult:
    path: Path
    config: dict
    summary: dict
    columns: dict[str, np.ndarray]
    sites: list[list[str]]

    @property
    def policy(self) -> str:
        return str(self.summary.get("policy") or self.config.get("policy") or self.path.name)

    @property
    def reached(self) -> bool:
        return self.summary.get("time_to_target_s") is not None

    @property
    def time_to_target_h(self) -> float | None:
        ttt = self.summary.get("time_to_target_s")
        return None if ttt is None else float(ttt) / 3600

    @property
    def sim_time_h(self) -> float:
        return float(self.summary.get("sim_time_s") or 0.0) / 3600


def load_run(run_dir: str | Path) -> RunResult:
    run_dir = Path(run_dir)
    rounds_path = run_dir / "rounds.csv"
    if not rounds_path.is_file():
        raise ReportError(f"{rounds_path}: not found (is {run_dir} a finished run directory?)")
    with rounds_path.open(newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise ReportError(f"{rounds_path}: missing column(s) {', '.join(missing)}")
        rows = list(reader)
    columns: dict[str, np.ndarray] = {}
    for name in NUMERIC:
        if name not in header:
            continue
        try:
            columns[name] = np.array([float(r[name]) for r in rows], dtype=np.float64)
        except ValueError as exc:
            raise ReportError(f"{rounds_path}: column {name}: {exc}") from None
    summary_path = run_dir / "summary.json"
    try:
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    except json.JSONDecodeError as exc:
        raise ReportError(f"{summary_path}: invalid JSON: {exc}") from None
    config_path = run_dir / "config.yaml"
    try:
        config = yaml.safe_load(config_path.read_text()) if config_path.exists() else {}
    except yaml.YAMLError as exc:
        raise ReportError(f"{config_path}: invalid YAML: {exc}") from None
    return RunResult(run_dir, config or {}, summary, columns, [r["sites"].split(";") for r in rows])


def is_run_dir(path: Path) -> bool:
    return (path / "rounds.csv").is_file()


def child_runs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir() and is_run_dir(p))
