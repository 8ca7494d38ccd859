"""What a comparison can rank policies by: time, energy, egress cost or carbon to the target.

Time to target is the paper's measure; energy, egress dollars and carbon come from each
run's summary.json (the aggregator's footprint, powertrip/core/footprint.py). A run written
before the footprint existed has none of them: its cells read '-' and, ranked by one of
them, it comes after the runs that have it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from powertrip.app.report.result import RunResult, as_float


@dataclass(frozen=True)
class Objective:
    name: str  # what --rank-by takes
    to_target: str  # summary key and comparison.csv column: spent until the target
    spent: str  # summary key and comparison.csv column: spent over the whole run
    what: str  # in words, for labels
    unit: str
    decimals: int
    #: the value in `unit` from the summary's value (hours from seconds for time)
    scale: float = 1.0

    def text(self, value: float) -> str:
        return f"{value * self.scale:.{self.decimals}f}"


#: what a comparison can be ranked by (`compare --rank-by`); not the run setting `objective`
#: (time or carbon: what each round optimises, powertrip/core/policies/objective.py)
RANKINGS: dict[str, Objective] = {
    "time": Objective("time", "time_to_target_s", "sim_time_s", "time", "h", 3, 1 / 3600),
    "energy": Objective("energy", "energy_to_target_kwh", "energy_kwh", "energy", "kWh", 3),
    "cost": Objective("cost", "egress_usd_to_target", "egress_usd", "egress cost", "$", 2),
    "carbon": Objective("carbon", "carbon_kg_to_target", "carbon_kg", "carbon", "kg CO2", 3),
}
#: the objectives the footprint adds to the paper's time
FOOTPRINT = ("energy", "cost", "carbon")
#: the comparison.csv columns they add (to target, then spent over the run)
FOOTPRINT_COLUMNS: tuple[str, ...] = tuple(
    key for name in FOOTPRINT for key in (RANKINGS[name].to_target, RANKINGS[name].spent)
)


def get_objective(name: str) -> Objective:
    """The objective by name; ValueError naming the allowed ones."""
    try:
        return RANKINGS[name]
    except KeyError:
        raise ValueError(f"--rank-by: {name!r} is not one of {', '.join(RANKINGS)}") from None


def footprint_values(run: RunResult) -> dict[str, float | None]:
    """The run's FOOTPRINT_COLUMNS from its summary (None where it has no value)."""
    out = {}
    for key in FOOTPRINT_COLUMNS:
        value = as_float(run.summary.get(key))
        out[key] = None if value != value else value
    return out


def has_footprint(rows: Iterable[Mapping[str, Any]]) -> bool:
    """Whether any comparison row has a footprint value (old runs have none)."""
    return any(row.get(key) is not None for row in rows for key in FOOTPRINT_COLUMNS)


def cell(row: Mapping[str, Any], objective: Objective) -> str:
    """'1.234' to target, '> 2.345' when the run missed the target after spending that,
    '-' when the run has no value."""
    value = row.get(objective.to_target)
    if value is not None and row.get("reached"):
        return objective.text(value)
    spent = row.get(objective.spent)
    return "-" if spent is None else f"> {objective.text(spent)}"


def pricing_note(runs: Iterable[RunResult]) -> str:
    """How the footprint was priced (the settings in the runs' summaries)."""
    settings = {
        tuple(sorted((run.summary.get("footprint") or {}).items()))
        for run in runs
        if run.summary.get("footprint")
    }
    if len(settings) != 1:
        how = "each run's own settings (see its summary.json)"
    else:
        s = dict(next(iter(settings)))
        trace = f", carbon trace {s['carbon_trace']}" if s.get("carbon_trace") else ""
        how = (
            f"GPU {s['gpu_power_w']:g} W computing, {s['gpu_idle_power_w']:g} W idle; egress "
            f"${s['egress_usd_per_gb']:g}/GB; {s['carbon_g_per_kwh']:g} gCO2/kWh{trace}"
        )
    return (
        "kWh, egress $ and kg CO2 to target: what the selected sites used until the round "
        f"that reached the target ({how}); '> X': the run missed the target after using X; "
        "'-': a run from before the accounting."
    )
