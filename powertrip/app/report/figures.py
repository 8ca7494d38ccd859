"""What every report figure shares: a headless matplotlib Figure, saving it as PNG, and the
labels, colours and line styles that keep run, comparison, sweep and paper figures alike.

Figures are built with matplotlib's object API on the Agg backend, so rendering works on
headless machines and never touches a caller's pyplot state.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from powertrip.app.report.result import RunResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

DPI = 110


def new_figure(width: float = 7.5, height: float = 4.5) -> Figure:
    """A headless figure (Agg backend), not registered with pyplot."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI)


def save_figure(fig: Figure, path: Path) -> Path:
    """Lay out and write a figure from new_figure() as PNG; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return path


def empty_note(ax: Axes, message: str) -> None:
    """Say in the middle of an empty plot why it is empty."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="gray")


def pct_label(value: float) -> str:
    """0.8 -> '80%' (a target accuracy in a legend or axis label)."""
    return f"{value * 100:g}%"


def clock_name(runs: Sequence[RunResult]) -> str:
    clocks = {run.clock for run in runs}
    if clocks == {"wall"}:
        return "wall-clock"
    return "simulated" if "wall" not in clocks else "mixed simulated/wall-clock"


def time_label(runs: Sequence[RunResult]) -> str:
    return f"{clock_name(runs)} time (h)"


def run_title(run: RunResult, what: str) -> str:
    workload = run.summary.get("workload") or run.config.get("workload") or ""
    return f"{run.name} on {workload}: {what}" if workload else f"{run.name}: {what}"


def colors_for(names: Sequence[str]) -> dict[str, tuple]:
    """A stable colour per name, in the order given (ranked runs get the strong colours)."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {name: cmap(i % cmap.N) for i, name in enumerate(names)}


def k_steps(run: RunResult) -> tuple[np.ndarray, np.ndarray]:
    """k held from each round's start to its end, as step coordinates in hours."""
    end = run.column("sim_time_s")
    start = end - np.nan_to_num(run.column("round_time_s"))
    k = run.column("k")
    x = np.concatenate([start, end[-1:]]) / 3600
    y = np.concatenate([k, k[-1:]])
    return x, y


def line_width(name: str) -> float:
    return 2.4 if name.startswith("powertrip") else 1.5


def z_order(name: str) -> float:
    """PowerTrip is drawn on top of the baselines."""
    return 3.0 if name.startswith("powertrip") else 2.0


def integer_ticks() -> MaxNLocator:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)
