"""The per-figure modules of reproduction.paper: the registry of figures and suites, and
their layering (no import of reproduce, no module over 400 lines)."""

from __future__ import annotations

import ast
from pathlib import Path

from reproduction import paper
from reproduction.paper import (
    FIGURES,
    MODULES,
    SUITES,
    fig02,
    fig03,
    fig05,
)

PAPER_DIR = Path(paper.__file__).parent


# ---- registry and layering -------------------------------------------------------------
def test_registry_has_figures_2_3_5_to_14_the_ablation_and_the_studies():
    beyond = ("11-regime", "8-9-plateau", "ablation", "heldout", "tau", "llm", "outer", "regions")
    assert set(FIGURES) == {"2", "3", *(str(n) for n in range(5, 15)), *beyond}
    assert list(SUITES) == [
        *("2", "3", "5", "6-7", "8", "9", "10", "11", "11-regime", "8-9-plateau", "12", "13"),
        "14",
        *("ablation", "heldout", "tau", "llm", "outer", "regions"),
    ]
    # Figs. 2-3 are computed from the power trace, Fig. 5 from the population: no runs
    for module in MODULES:
        no_runs = module in (fig02, fig03, fig05)
        assert bool(module.SUITE.variants) == (not no_runs), module.__name__
    # every set-up a figure uses is introduced by some figure (Fig. 11 reads Figs. 6-7's)
    introduced = {v.name for module in MODULES for v in module.VARIANTS}
    for module in MODULES:
        assert introduced >= set(module.SUITE.variants), module.__name__


def _imports(path: Path) -> set[str]:
    """Every module a file imports (absolute names; relative ones resolved in the package)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative to reproduction.paper
                package = ["reproduction", "paper"][: 3 - node.level]
                base = ".".join([*package, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def test_no_paper_module_imports_reproduce():
    """paper/ declares and reports; reproduce (and its planner) import paper, never back."""
    files = sorted(PAPER_DIR.glob("*.py"))
    assert len(files) >= 10
    for file in files:
        forbidden = ("reproduction.reproduce", "reproduction.cli", "powertrip.app.experiments.plan")
        bad = {m for m in _imports(file) if m.startswith(forbidden)}
        assert not bad, f"{file.name} imports {bad}"


def test_no_paper_module_is_longer_than_400_lines():
    for file in PAPER_DIR.glob("*.py"):
        assert len(file.read_text().splitlines()) <= 400, file.name
