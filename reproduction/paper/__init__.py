"""The paper's evaluation, one module per figure (§2.1: Figs. 2-3, §5: Figs. 5-14) plus
our ablation and studies (held-out seeds, tau, LLM fine-tuning).

Each figure module holds its suite spec (`SUITE`: set-ups, arms and the paper's text),
the set-ups it introduces (`VARIANTS`), its `claims(data, meta)` and `plots(data, out,
meta)`, and optionally `table(data, meta)` to replace the default times table (titled
`TABLE_TITLE`) and `NOTES` for a figure without set-ups (Figs. 2, 3, 5 need no runs). This
registry maps a figure key to its module; `reproduction.reproduce` plans and runs
from it and `reproduction.paper.render` renders from it. Nothing here imports reproduce.
"""

from __future__ import annotations

from types import ModuleType

from powertrip.app.experiments.suite import Registry, Suite, Variant
from reproduction.paper import (
    ablation,
    fig02,
    fig03,
    fig05,
    fig06_07,
    fig08,
    fig09,
    fig10,
    fig11,
    fig11_regime,
    fig12,
    fig13,
    fig14,
    heldout,
    llm,
    outer_study,
    plateau,
    regions_study,
    tau_sweep,
)
from reproduction.paper.data import grid_refinement, source_kstar

#: in the order reports and the summary list them
MODULES: tuple[ModuleType, ...] = (
    fig02,
    fig03,
    fig05,
    fig06_07,
    fig08,
    fig09,
    fig10,
    fig11,
    fig11_regime,
    plateau,
    fig12,
    fig13,
    fig14,
    ablation,
    heldout,
    tau_sweep,
    llm,
    outer_study,
    regions_study,
)

#: figure key (what --figure takes) -> its module; Figs. 6 and 7 share their runs; Figs. 2,
#: 3 and 5 need none (2 and 3 are computed from the power trace, 5 from the base config's
#: site population)
FIGURES: dict[str, ModuleType] = {
    "2": fig02,
    "3": fig03,
    "5": fig05,
    "6": fig06_07,
    "7": fig06_07,
    "8": fig08,
    "9": fig09,
    "10": fig10,
    "11": fig11,
    "11-regime": fig11_regime,
    "8-9-plateau": plateau,
    "12": fig12,
    "13": fig13,
    "14": fig14,
    "ablation": ablation,
    "heldout": heldout,
    "tau": tau_sweep,
    "llm": llm,
    "outer": outer_study,
    "regions": regions_study,
}

#: canonical key ('6-7', '8', ..., 'ablation') -> suite
SUITES: dict[str, Suite] = {m.SUITE.figure: m.SUITE for m in MODULES}


def _variants() -> dict[str, Variant]:
    found: dict[str, Variant] = {}
    for module in MODULES:
        for variant in module.VARIANTS:
            if found.setdefault(variant.name, variant) != variant:
                raise RuntimeError(f"two figures define set-up {variant.name!r} differently")
    return found


#: every set-up any figure needs, by name
VARIANTS: dict[str, Variant] = _variants()


def module_of(key: str) -> ModuleType:
    """The module of a figure key or canonical key ('7' and '6-7' -> fig06_07)."""
    if key in FIGURES:
        return FIGURES[key]
    for module in MODULES:
        if module.SUITE.figure == key:
            return module
    raise KeyError(key)


def canonical(key: str) -> str:
    """'6' and '7' -> '6-7'; other keys unchanged."""
    return module_of(key).SUITE.figure


#: the figures as the planner and executor take them (plan.py, execution.py)
PAPER = Registry(
    suites=SUITES,
    variants=VARIANTS,
    keys={key: module.SUITE.figure for key, module in FIGURES.items()},
    refinement=grid_refinement,
    kstar=source_kstar,
)

__all__ = ["FIGURES", "MODULES", "PAPER", "SUITES", "VARIANTS", "canonical", "module_of"]
