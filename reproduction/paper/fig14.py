"""Paper Fig. 14: Speech Commands (KWT-1) and Shakespeare (LSTM) (§5.4)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from powertrip.app.experiments.suite import WORKLOAD_FIELDS, Suite, Variant
from powertrip.app.report import claims as C
from reproduction.paper.common import plot_time_bars, variant_equal_time_claim
from reproduction.paper.data import VariantData, facts


def workload_variant(name: str) -> Variant:
    """A set-up on another workload with that workload's own lr, batch, target, ..."""
    return Variant(
        name,
        f"{name} workload (its own lr, batch, target), uniform power, 1.5 GB",
        {"workload": name, **{f: None for f in WORKLOAD_FIELDS}},
    )


SPEECH = workload_variant("speech")
SHAKESPEARE = workload_variant("shakespeare")

SUITE = Suite(
    "14",
    "Workloads: Speech Commands and Shakespeare",
    "Paper Fig. 14: PowerTrip against static k* on Google Speech Commands (KWT-1) and "
    "Shakespeare (LSTM): 32 % and 19 % faster respectively.",
    (SPEECH.name, SHAKESPEARE.name),
    ("powertrip", "sweep", "static-k*"),
)
VARIANTS = (SPEECH, SHAKESPEARE)

NAMES = ("powertrip", "static-k*")


def claims(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    rows = []
    for key, red in ((SPEECH.name, 0.32), (SHAKESPEARE.name, 0.19)):
        v = d[key]
        row = C.faster_claim(
            "14",
            "powertrip",
            "static-k*",
            v.times(NAMES),
            None,
            None,
            red,
            claim=f"on {key} PowerTrip is faster than static k*"
            + (f" (k* = {v.kstar})" if v.kstar is not None else ""),
        )
        equal = variant_equal_time_claim("14", v, NAMES, f" on {key}")
        rows.extend(C.finish([row, equal], facts(v, meta)))
    return rows


def plots(d: Mapping[str, VariantData], out: Path, meta: Mapping[str, Any]) -> list[Path]:
    groups = [(v.name, v.times(NAMES)) for v in d.values()]
    return [
        plot_time_bars(
            groups,
            out / "fig14_time_to_accuracy.png",
            "Time to target per set-up and policy (fig. 14)",
        )
    ]
