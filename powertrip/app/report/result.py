"""One finished run in memory (`RunResult`) and the error every report reader raises.

Kept apart from reading the files (rundir.py) so the comparison, sweep and plot modules
depend on this small type, not on how a run directory is laid out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


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
        return np.array([as_float(r.get(name)) for r in self.rounds], dtype=float)

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


def as_float(value: Any) -> float:
    """A number from a CSV cell, summary value or config setting; NaN when there is none."""
    if value is None or value == "":
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def csv_number(value: float | None) -> str:
    """A number as comparison.csv and sweep.csv write it: empty when unknown, 6 decimals."""
    if value is None or value != value:
        return ""
    return repr(round(float(value), 6))
