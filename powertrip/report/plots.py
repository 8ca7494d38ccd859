"""PNG plots of one run, a policy comparison and a static-k sweep (paper Figs. 8-10).

Figures are built with matplotlib's object API on the Agg backend, so rendering works on
headless machines and never touches a caller's pyplot state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from powertrip.report.data import RunResult, best_k, comparison_rows, sweep_rows

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

DPI = 110


# ---- helpers ---------------------------------------------------------------------------
def _figure(width: float = 7.5, height: float = 4.5) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI)


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return path


def new_figure(width: float = 7.5, height: float = 4.5) -> Figure:
    """A headless figure for callers outside this module (the paper's figure modules)."""
    return _figure(width, height)


def save_figure(fig: Figure, path: Path) -> Path:
    """Lay out and write a figure from new_figure() as PNG; returns the path."""
    return _save(fig, path)


def _empty(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="gray")


def _pct(value: float) -> str:
    return f"{value * 100:g}%"


def _clock_name(runs: Sequence[RunResult]) -> str:
    clocks = {run.clock for run in runs}
    if clocks == {"wall"}:
        return "wall-clock"
    return "simulated" if "wall" not in clocks else "mixed simulated/wall-clock"


def _time_label(runs: Sequence[RunResult]) -> str:
    return f"{_clock_name(runs)} time (h)"


def _title_run(run: RunResult, what: str) -> str:
    workload = run.summary.get("workload") or run.config.get("workload") or ""
    return f"{run.name} on {workload}: {what}" if workload else f"{run.name}: {what}"


def _colors(names: Sequence[str]) -> dict[str, tuple]:
    """A stable colour per name, in the order given (ranked runs get the strong colours)."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {name: cmap(i % cmap.N) for i, name in enumerate(names)}


def _ranked(runs: Sequence[RunResult]) -> list[RunResult]:
    order = [row["policy"] for row in comparison_rows(runs)]
    return sorted(runs, key=lambda r: order.index(r.name))


def _k_steps(run: RunResult) -> tuple[np.ndarray, np.ndarray]:
    """k held from each round's start to its end, as step coordinates in hours."""
    end = run.column("sim_time_s")
    start = end - np.nan_to_num(run.column("round_time_s"))
    k = run.column("k")
    x = np.concatenate([start, end[-1:]]) / 3600
    y = np.concatenate([k, k[-1:]])
    return x, y


def _linewidth(name: str) -> float:
    return 2.4 if name.startswith("powertrip") else 1.5


def _zorder(name: str) -> float:
    """PowerTrip is drawn on top of the baselines."""
    return 3.0 if name.startswith("powertrip") else 2.0


def _integer_ticks() -> MaxNLocator:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


# ---- one run ---------------------------------------------------------------------------
def plot_run(run: RunResult, out_dir: str | Path) -> list[Path]:
    """The per-run figures; site_map.png only when the summary lists the sites."""
    out = Path(out_dir)
    paths = [
        _run_accuracy(run, out / "accuracy_vs_time.png"),
        _run_k(run, out / "k_vs_time.png"),
        _run_breakdown(run, out / "round_breakdown.png"),
        _run_predicted(run, out / "predicted_vs_actual.png"),
        plot_prediction_error(
            [run], out / "prediction_error.png", _title_run(run, "round-time prediction error")
        ),
    ]
    if run.summary.get("sites"):
        paths.append(_run_site_map(run, out / "site_map.png"))
    return paths


def _run_accuracy(run: RunResult, path: Path) -> Path:
    fig = _figure()
    ax = fig.add_subplot()
    if run.rounds:
        hours = run.column("sim_time_s") / 3600
        marker = "o" if len(run.rounds) <= 60 else None
        ax.plot(hours, run.column("accuracy"), marker=marker, ms=3.5, lw=1.8, label="accuracy")
    else:
        _empty(ax, "no rounds recorded")
    target = run.target_accuracy
    if target is not None:
        ax.axhline(target, ls="--", color="gray", lw=1.2, label=f"target {_pct(target)}")
    if run.time_to_target_s is not None:
        ttt_h = run.time_to_target_s / 3600
        ax.axvline(ttt_h, ls=":", color="tab:red", lw=1.2, label=f"reached at {ttt_h:.3g} h")
    ax.set_xlabel(_time_label([run]))
    ax.set_ylabel("held-out accuracy")
    ax.set_title(_title_run(run, "accuracy vs time"))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return _save(fig, path)


def _run_k(run: RunResult, path: Path) -> Path:
    fig = _figure(7.5, 4.0)
    ax = fig.add_subplot()
    if run.rounds:
        x, y = _k_steps(run)
        ax.step(x, y, where="post", lw=1.8, label="k (sites this round)")
        mean_k = float(np.nanmean(run.column("k")))
        ax.axhline(mean_k, ls="--", color="gray", lw=1, label=f"mean k = {mean_k:.1f}")
        ax.set_ylim(0, np.nanmax(y) * 1.15 + 1)
        ax.yaxis.set_major_locator(_integer_ticks())
        ax.legend(loc="best")
    else:
        _empty(ax, "no rounds recorded")
    ax.set_xlabel(_time_label([run]))
    ax.set_ylabel("sites selected (k)")
    ax.set_title(_title_run(run, "sites per round over time"))
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _run_breakdown(run: RunResult, path: Path) -> Path:
    """Compute + comm (+ aggregation) is the straggler's round; wait overlaps it, so it is
    drawn as a line, not stacked: it is the mean idle time of the selected sites."""
    fig = _figure(8.0, 4.5)
    ax = fig.add_subplot()
    if not run.rounds:
        _empty(ax, "no rounds recorded")
    else:
        rounds = run.column("round")
        n = len(rounds)
        width = 0.8 if n <= 60 else 1.0
        edge = {"edgecolor": "white", "linewidth": 0.5} if n <= 60 else {}
        parts = [("compute_s", "compute (straggler)"), ("comm_s", "communication (straggler)")]
        if run.has_column("aggregation_s") and np.nansum(run.column("aggregation_s")) > 0:
            parts.append(("aggregation_s", "aggregation"))
        bottom = np.zeros(n)
        for (column, label), color in zip(
            parts, ("tab:blue", "tab:orange", "tab:green"), strict=False
        ):
            values = np.nan_to_num(run.column(column))
            ax.bar(rounds, values, width, bottom=bottom, label=label, color=color, **edge)
            bottom += values
        ax.plot(
            rounds,
            run.column("wait_s"),
            zorder=3,
            color="black",
            marker="D" if n <= 60 else None,
            ms=3,
            lw=1,
            label="wait (mean idle of selected sites)",
        )
        handles, labels = ax.get_legend_handles_labels()
        order = [*range(1, len(handles)), 0]  # the wait line is first; list it last
        ax.legend(
            [handles[i] for i in order],
            [labels[i] for i in order],
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=8,
            frameon=False,
        )
        ax.set_xlim(rounds.min() - 0.8, rounds.max() + 0.8)
        ax.xaxis.set_major_locator(_integer_ticks())
    ax.set_xlabel("round")
    ax.set_ylabel("seconds")
    ax.set_title(_title_run(run, "round time breakdown"))
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def _run_predicted(run: RunResult, path: Path) -> Path:
    fig = _figure(6.0, 5.2)
    ax = fig.add_subplot()
    title = _title_run(run, "predicted vs actual round time")
    if run.rounds:
        actual = run.column("round_time_s")
        predicted = run.column("predicted_round_time_s")
        ok = np.isfinite(actual) & np.isfinite(predicted) & (predicted > 0)
    else:
        ok = np.zeros(0, dtype=bool)
    if ok.any():
        a, p, r = actual[ok], predicted[ok], run.column("round")[ok]
        top = float(max(a.max(), p.max())) * 1.08
        ax.plot([0, top], [0, top], ls="--", color="gray", lw=1, label="y = x (perfect)")
        points = ax.scatter(a, p, c=r, cmap="viridis", s=28, edgecolors="k", linewidths=0.3)
        fig.colorbar(points, ax=ax, label="round", ticks=_integer_ticks())
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_aspect("equal", adjustable="box")
        mape = float(np.nanmean(np.abs(p - a) / np.where(a > 0, a, np.nan)))
        note = f"mean |error| {mape:.1%}" if math.isfinite(mape) else ""
        if ok.sum() < len(ok):
            note += f"; {len(ok) - ok.sum()} rounds without a prediction"
        if note:
            title += f"\n({note.lstrip('; ')})"
        ax.legend(loc="upper left")
    else:
        _empty(ax, "no round-time predictions recorded")
    ax.set_xlabel("actual round time (s)")
    ax.set_ylabel("predicted round time (s)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _run_site_map(run: RunResult, path: Path) -> Path:
    sites = run.summary["sites"]
    counts = run.selected_sites()
    distance = np.array([float(s["distance_miles"]) for s in sites])
    power = np.array([float(s["power_fraction"]) for s in sites])
    times = np.array([counts.get(str(s["site_id"]), 0) for s in sites])
    chosen = times > 0
    fig = _figure(7.5, 5.0)
    ax = fig.add_subplot()
    ax.scatter(
        distance[~chosen],
        power[~chosen],
        facecolors="none",
        edgecolors="0.6",
        s=24,
        label=f"never selected ({int((~chosen).sum())})",
    )
    if chosen.any():
        points = ax.scatter(
            distance[chosen],
            power[chosen],
            c=times[chosen],
            cmap="plasma",
            s=40,
            edgecolors="k",
            linewidths=0.4,
            label=f"selected at least once ({int(chosen.sum())})",
        )
        fig.colorbar(points, ax=ax, label="rounds selected", ticks=_integer_ticks())
    ax.set_xlabel("distance to aggregator (miles)")
    ax.set_ylabel("power fraction (share of GPUs powered)")
    ax.set_title(_title_run(run, "site population"))
    ax.set_ylim(-0.03, 1.05 if power.size == 0 else max(1.05, float(power.max()) * 1.05))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path)


# ---- comparison ------------------------------------------------------------------------
def plot_comparison(comp_dir: str | Path, runs: Sequence[RunResult]) -> list[Path]:
    """Accuracy vs time, time to target (Fig. 9 style) and k over time, one entry per policy."""
    out = Path(comp_dir)
    ranked = _ranked(runs)
    colors = _colors([r.name for r in ranked])
    return [
        plot_accuracy_lines(ranked, out / "accuracy_vs_time.png", colors),
        _comparison_bars(ranked, out / "time_to_accuracy.png", colors),
        _comparison_k(ranked, out / "k_vs_time.png", colors),
    ]


def plot_accuracy_lines(
    runs: Sequence[RunResult], path: Path, colors: dict[str, tuple] | None = None
) -> Path:
    """Accuracy vs time, one line per run (legend in the given order)."""
    colors = colors or _colors([r.name for r in runs])
    fig = _figure(8.5, 5.0)
    ax = fig.add_subplot()
    for run in runs:
        if not run.rounds:
            continue
        ax.plot(
            run.column("sim_time_s") / 3600,
            run.column("accuracy"),
            color=colors[run.name],
            lw=_linewidth(run.name),
            zorder=_zorder(run.name),
            label=run.name,
        )
    targets = {run.target_accuracy for run in runs if run.target_accuracy is not None}
    for target in sorted(targets):
        ax.axhline(target, ls="--", color="gray", lw=1.2, label=f"target {_pct(target)}")
    ax.set_xlabel(_time_label(runs))
    ax.set_ylabel("held-out accuracy")
    ax.set_title("Accuracy vs time")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return _save(fig, path)


def _comparison_bars(runs: Sequence[RunResult], path: Path, colors: dict[str, tuple]) -> Path:
    fig = _figure(8.0, 0.9 + 0.45 * max(len(runs), 2))
    ax = fig.add_subplot()
    rows = comparison_rows(runs)
    longest = max((r["time_to_target_s"] or r["sim_time_s"] or 0.0) for r in rows) / 3600
    longest = longest or 1.0
    for i, row in enumerate(rows):
        if row["reached"]:
            hours = row["time_to_target_s"] / 3600
            ax.barh(i, hours, color=colors[row["policy"]], edgecolor="black", linewidth=0.5)
            text = f"{hours:.3g} h"
        else:
            hours = (row["sim_time_s"] or 0.0) / 3600
            ax.barh(i, hours, color="0.9", edgecolor="0.4", hatch="//", linewidth=0.5)
            text = f"not reached (> {hours:.3g} h)"
        ax.text(hours + longest * 0.01, i, text, va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [r["policy"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, longest * 1.35)
    target = next((r.target_accuracy for r in runs if r.target_accuracy is not None), None)
    what = f"time to {_pct(target)} accuracy" if target is not None else "time to target"
    ax.set_xlabel(f"{what} (h, {_clock_name(runs)} time)")
    ax.set_title(f"{what.capitalize()} per policy (lower is better)")
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, path)


def _comparison_k(runs: Sequence[RunResult], path: Path, colors: dict[str, tuple]) -> Path:
    fig = _figure(8.5, 4.5)
    ax = fig.add_subplot()
    for run in runs:
        if not run.rounds:
            continue
        x, y = _k_steps(run)
        ax.step(
            x,
            y,
            where="post",
            color=colors[run.name],
            lw=_linewidth(run.name),
            zorder=_zorder(run.name),
            label=run.name,
        )
    ax.set_xlabel(_time_label(runs))
    ax.set_ylabel("sites selected (k)")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(_integer_ticks())
    ax.set_title("Sites per round over time")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return _save(fig, path)


# ---- static-k sweep --------------------------------------------------------------------
def plot_sweep(sweep_dir: str | Path, runs: Sequence[RunResult], ks: Sequence[int]) -> list[Path]:
    """Time to target vs static k (paper Fig. 8), with k* marked; misses drawn hollow on top."""
    rows = sweep_rows(runs, ks)
    k_star = best_k(runs, ks)
    reached = [r for r in rows if r["reached"]]
    missed = [r for r in rows if not r["reached"]]
    fig = _figure(7.5, 4.8)
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
        _empty(ax, "no k reached the target")
    ax.set_ylim(0, top * 1.08)
    if rows:
        ax.set_xticks([r["k"] for r in rows])
    target = next((r.target_accuracy for r in runs if r.target_accuracy is not None), None)
    what = f"time to {_pct(target)} accuracy" if target is not None else "time to target"
    ax.set_xlabel("k (sites per round, static top-k)")
    ax.set_ylabel(f"{what} (h)")
    ax.set_title("Static-k sweep: time to target vs k")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return [_save(fig, Path(sweep_dir) / "static_k_sweep.png")]


# ---- prediction error (explainability) -------------------------------------------------
def prediction_errors(runs: Sequence[RunResult]) -> np.ndarray:
    """Relative error (predicted - actual) / actual of every round that has a prediction."""
    errors = []
    for run in runs:
        if not run.rounds or not run.has_column("predicted_round_time_s"):
            continue
        actual = run.column("round_time_s")
        predicted = run.column("predicted_round_time_s")
        ok = np.isfinite(actual) & np.isfinite(predicted) & (predicted > 0) & (actual > 0)
        errors.append((predicted[ok] - actual[ok]) / actual[ok])
    return np.concatenate(errors) if errors else np.zeros(0)


def plot_prediction_error(runs: Sequence[RunResult], path: Path, title: str = "") -> Path:
    """Histogram of the signed relative error and CDF of its absolute value."""
    errors = prediction_errors(runs)
    fig = _figure(9.0, 4.0)
    hist, cdf = fig.subplots(1, 2)
    if errors.size:
        pct = errors * 100
        bins = min(40, max(8, int(np.sqrt(errors.size)) * 2))
        hist.hist(pct, bins=bins, color="tab:blue", edgecolor="white", linewidth=0.5)
        hist.axvline(0, color="gray", ls="--", lw=1)
        hist.axvline(
            float(np.median(pct)), color="tab:red", lw=1.2, label=f"median {np.median(pct):+.1f} %"
        )
        hist.legend(loc="upper right", fontsize=8)
        absolute = np.sort(np.abs(pct))
        share = np.arange(1, absolute.size + 1) / absolute.size
        cdf.step(absolute, share, where="post", lw=1.8)
        p90 = float(np.percentile(absolute, 90))
        cdf.axvline(p90, color="tab:red", ls=":", lw=1.2, label=f"90 % within {p90:.1f} %")
        cdf.set_ylim(0, 1.02)
        cdf.legend(loc="lower right", fontsize=8)
    else:
        _empty(hist, "no round-time predictions recorded")
        _empty(cdf, "no round-time predictions recorded")
    hist.set_xlabel("(predicted - actual) / actual round time (%)")
    hist.set_ylabel("rounds")
    hist.grid(alpha=0.3)
    cdf.set_xlabel("|prediction error| (%)")
    cdf.set_ylabel("share of rounds")
    cdf.grid(alpha=0.3)
    fig.suptitle(title or f"Round-time prediction error ({errors.size} rounds)", fontsize=11)
    return _save(fig, path)
