"""The PNG figures of a policy comparison (accuracy, time to target and k per policy) and of
a static-k sweep (time to target against k, paper Fig. 8)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from powertrip.app.report import objectives as O
from powertrip.app.report.comparison import comparison_rows
from powertrip.app.report.figures import (
    clock_name,
    colors_for,
    empty_note,
    integer_ticks,
    k_steps,
    line_width,
    new_figure,
    pct_label,
    save_figure,
    time_label,
    z_order,
)
from powertrip.app.report.result import RunResult
from powertrip.app.report.sweep import best_k, sweep_rows


def _ranked(runs: Sequence[RunResult]) -> list[RunResult]:
    order = [row["policy"] for row in comparison_rows(runs)]
    return sorted(runs, key=lambda r: order.index(r.name))


# ---- comparison ------------------------------------------------------------------------
#: the bar chart of each objective (time's is the paper's Fig. 9)
BAR_FILES = {
    "time": "time_to_accuracy.png",
    "energy": "energy_to_accuracy.png",
    "cost": "cost_to_accuracy.png",
    "carbon": "carbon_to_accuracy.png",
}


def plot_comparison(comp_dir: str | Path, runs: Sequence[RunResult]) -> list[Path]:
    """Accuracy vs time, time to target (Fig. 9 style) and k over time, one entry per
    policy; energy, egress cost and carbon to target too when the runs have them."""
    out = Path(comp_dir)
    ranked = _ranked(runs)
    colors = colors_for([r.name for r in ranked])
    paths = [
        plot_accuracy_lines(ranked, out / "accuracy_vs_time.png", colors),
        _comparison_bars(ranked, out / BAR_FILES["time"], colors),
        _comparison_k(ranked, out / "k_vs_time.png", colors),
    ]
    if O.has_footprint(comparison_rows(runs)):
        for name in O.FOOTPRINT:
            paths.append(_comparison_bars(ranked, out / BAR_FILES[name], colors, name))
    return paths


def plot_accuracy_lines(
    runs: Sequence[RunResult], path: Path, colors: dict[str, tuple] | None = None
) -> Path:
    """Accuracy vs time, one line per run (legend in the given order)."""
    colors = colors or colors_for([r.name for r in runs])
    fig = new_figure(8.5, 5.0)
    ax = fig.add_subplot()
    for run in runs:
        if not run.rounds:
            continue
        ax.plot(
            run.column("sim_time_s") / 3600,
            run.column("accuracy"),
            color=colors[run.name],
            lw=line_width(run.name),
            zorder=z_order(run.name),
            label=run.name,
        )
    targets = {run.target_accuracy for run in runs if run.target_accuracy is not None}
    for target in sorted(targets):
        ax.axhline(target, ls="--", color="gray", lw=1.2, label=f"target {pct_label(target)}")
    ax.set_xlabel(time_label(runs))
    ax.set_ylabel("held-out accuracy")
    ax.set_title("Accuracy vs time")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return save_figure(fig, path)


def _comparison_bars(
    runs: Sequence[RunResult], path: Path, colors: dict[str, tuple], objective: str = "time"
) -> Path:
    """One bar per policy of `objective` to target, ranked by it; a run that missed the
    target is a hatched bar of what it spent. A run without the value has no bar."""
    obj = O.RANKINGS[objective]
    fig = new_figure(8.0, 0.9 + 0.45 * max(len(runs), 2))
    ax = fig.add_subplot()
    rows = comparison_rows(runs, objective)

    def amount(row) -> float | None:
        value = row[obj.to_target] if row["reached"] else row[obj.spent]
        return None if value is None else value * obj.scale

    longest = max((amount(r) or 0.0) for r in rows) or 1.0
    for i, row in enumerate(rows):
        value = amount(row)
        if value is None:
            text = "no value (run from before the accounting)"
            value = 0.0
        elif row["reached"]:
            ax.barh(i, value, color=colors[row["policy"]], edgecolor="black", linewidth=0.5)
            text = f"{value:.3g} {obj.unit}"
        else:
            ax.barh(i, value, color="0.9", edgecolor="0.4", hatch="//", linewidth=0.5)
            text = f"not reached (> {value:.3g} {obj.unit})"
        ax.text(value + longest * 0.01, i, text, va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [r["policy"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, longest * 1.35)
    target = next((r.target_accuracy for r in runs if r.target_accuracy is not None), None)
    to = f"to {pct_label(target)} accuracy" if target is not None else "to target"
    what = f"{obj.what} {to}"
    unit = f"h, {clock_name(runs)} time" if objective == "time" else obj.unit
    ax.set_xlabel(f"{what} ({unit})")
    ax.set_title(f"{what.capitalize()} per policy (lower is better)")
    ax.grid(alpha=0.3, axis="x")
    return save_figure(fig, path)


def _comparison_k(runs: Sequence[RunResult], path: Path, colors: dict[str, tuple]) -> Path:
    fig = new_figure(8.5, 4.5)
    ax = fig.add_subplot()
    for run in runs:
        if not run.rounds:
            continue
        x, y = k_steps(run)
        ax.step(
            x,
            y,
            where="post",
            color=colors[run.name],
            lw=line_width(run.name),
            zorder=z_order(run.name),
            label=run.name,
        )
    ax.set_xlabel(time_label(runs))
    ax.set_ylabel("sites selected (k)")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(integer_ticks())
    ax.set_title("Sites per round over time")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return save_figure(fig, path)


# ---- static-k sweep --------------------------------------------------------------------
def plot_sweep(sweep_dir: str | Path, runs: Sequence[RunResult], ks: Sequence[int]) -> list[Path]:
    """Time to target vs static k (paper Fig. 8), with k* marked; misses drawn hollow on top."""
    rows = sweep_rows(runs, ks)
    k_star = best_k(runs, ks)
    reached = [r for r in rows if r["reached"]]
    missed = [r for r in rows if not r["reached"]]
    fig = new_figure(7.5, 4.8)
    ax = fig.add_subplot()
    hours = [r["time_to_target_s"] / 3600 for r in reached]
    spans = [(r["sim_time_s"] or 0.0) / 3600 for r in missed]
    top = max([*hours, *spans, 1e-9]) * 1.15
    if reached:
        ax.plot(
            [r["k"] for r in reached],
            hours,
            marker="o",
            lw=1.8,
            color="tab:blue",
            label="time to target",
        )
    if missed:
        ax.scatter(
            [r["k"] for r in missed],
            [top] * len(missed),
            s=60,
            facecolors="none",
            edgecolors="tab:red",
            linewidths=1.5,
            label="not reached (drawn at top)",
        )
        ax.axhline(top, color="tab:red", lw=0.6, ls=":")
    if k_star is not None:
        star = next(r for r in reached if r["k"] == k_star)
        star_h = star["time_to_target_s"] / 3600
        ax.scatter(
            [k_star],
            [star_h],
            marker="*",
            s=260,
            color="gold",
            edgecolors="black",
            zorder=5,
            label=f"k* = {k_star} ({star_h:.3g} h)",
        )
        ax.annotate(
            f"k* = {k_star}",
            (k_star, star_h),
            textcoords="offset points",
            xytext=(0, -18),
            ha="center",
            fontsize=9,
        )
    else:
        empty_note(ax, "no k reached the target")
    ax.set_ylim(0, top * 1.08)
    if rows:
        ax.set_xticks([r["k"] for r in rows])
    target = next((r.target_accuracy for r in runs if r.target_accuracy is not None), None)
    what = f"time to {pct_label(target)} accuracy" if target is not None else "time to target"
    ax.set_xlabel("k (sites per round, static top-k)")
    ax.set_ylabel(f"{what} (h)")
    ax.set_title("Static-k sweep: time to target vs k")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return [save_figure(fig, Path(sweep_dir) / "static_k_sweep.png")]
