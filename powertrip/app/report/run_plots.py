"""The PNG figures of one run: accuracy and k over time, the round-time breakdown, the
policy's predicted against actual round time, its prediction error and the site map."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from powertrip.app.report.figures import (
    empty_note,
    integer_ticks,
    k_steps,
    new_figure,
    pct_label,
    run_title,
    save_figure,
    time_label,
)
from powertrip.app.report.result import RunResult


def plot_run(run: RunResult, out_dir: str | Path) -> list[Path]:
    """The per-run figures; site_map.png only when the summary lists the sites."""
    out = Path(out_dir)
    paths = [
        _run_accuracy(run, out / "accuracy_vs_time.png"),
        _run_k(run, out / "k_vs_time.png"),
        _run_breakdown(run, out / "round_breakdown.png"),
        _run_predicted(run, out / "predicted_vs_actual.png"),
        plot_prediction_error(
            [run], out / "prediction_error.png", run_title(run, "round-time prediction error")
        ),
    ]
    if run.summary.get("sites"):
        paths.append(_run_site_map(run, out / "site_map.png"))
    return paths


def _run_accuracy(run: RunResult, path: Path) -> Path:
    fig = new_figure()
    ax = fig.add_subplot()
    if run.rounds:
        hours = run.column("sim_time_s") / 3600
        marker = "o" if len(run.rounds) <= 60 else None
        ax.plot(hours, run.column("accuracy"), marker=marker, ms=3.5, lw=1.8, label="accuracy")
    else:
        empty_note(ax, "no rounds recorded")
    target = run.target_accuracy
    if target is not None:
        ax.axhline(target, ls="--", color="gray", lw=1.2, label=f"target {pct_label(target)}")
    if run.time_to_target_s is not None:
        ttt_h = run.time_to_target_s / 3600
        ax.axvline(ttt_h, ls=":", color="tab:red", lw=1.2, label=f"reached at {ttt_h:.3g} h")
    ax.set_xlabel(time_label([run]))
    ax.set_ylabel("held-out accuracy")
    ax.set_title(run_title(run, "accuracy vs time"))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return save_figure(fig, path)


def _run_k(run: RunResult, path: Path) -> Path:
    fig = new_figure(7.5, 4.0)
    ax = fig.add_subplot()
    if run.rounds:
        x, y = k_steps(run)
        ax.step(x, y, where="post", lw=1.8, label="k (sites this round)")
        mean_k = float(np.nanmean(run.column("k")))
        ax.axhline(mean_k, ls="--", color="gray", lw=1, label=f"mean k = {mean_k:.1f}")
        ax.set_ylim(0, np.nanmax(y) * 1.15 + 1)
        ax.yaxis.set_major_locator(integer_ticks())
        ax.legend(loc="best")
    else:
        empty_note(ax, "no rounds recorded")
    ax.set_xlabel(time_label([run]))
    ax.set_ylabel("sites selected (k)")
    ax.set_title(run_title(run, "sites per round over time"))
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def _run_breakdown(run: RunResult, path: Path) -> Path:
    """Compute + comm (+ aggregation) is the straggler's round; wait overlaps it, so it is
    drawn as a line, not stacked: it is the mean idle time of the selected sites."""
    fig = new_figure(8.0, 4.5)
    ax = fig.add_subplot()
    if not run.rounds:
        empty_note(ax, "no rounds recorded")
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
        ax.xaxis.set_major_locator(integer_ticks())
    ax.set_xlabel("round")
    ax.set_ylabel("seconds")
    ax.set_title(run_title(run, "round time breakdown"))
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, path)


def _run_predicted(run: RunResult, path: Path) -> Path:
    fig = new_figure(6.0, 5.2)
    ax = fig.add_subplot()
    title = run_title(run, "predicted vs actual round time")
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
        fig.colorbar(points, ax=ax, label="round", ticks=integer_ticks())
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
        empty_note(ax, "no round-time predictions recorded")
    ax.set_xlabel("actual round time (s)")
    ax.set_ylabel("predicted round time (s)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def _run_site_map(run: RunResult, path: Path) -> Path:
    sites = run.summary["sites"]
    counts = run.selected_sites()
    distance = np.array([float(s["distance_miles"]) for s in sites])
    power = np.array([float(s["power_fraction"]) for s in sites])
    times = np.array([counts.get(str(s["site_id"]), 0) for s in sites])
    chosen = times > 0
    fig = new_figure(7.5, 5.0)
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
        fig.colorbar(points, ax=ax, label="rounds selected", ticks=integer_ticks())
    ax.set_xlabel("distance to aggregator (miles)")
    ax.set_ylabel("power fraction (share of GPUs powered)")
    ax.set_title(run_title(run, "site population"))
    ax.set_ylim(-0.03, 1.05 if power.size == 0 else max(1.05, float(power.max()) * 1.05))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return save_figure(fig, path)


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
    fig = new_figure(9.0, 4.0)
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
        empty_note(hist, "no round-time predictions recorded")
        empty_note(cdf, "no round-time predictions recorded")
    hist.set_xlabel("(predicted - actual) / actual round time (%)")
    hist.set_ylabel("rounds")
    hist.grid(alpha=0.3)
    cdf.set_xlabel("|prediction error| (%)")
    cdf.set_ylabel("share of rounds")
    cdf.grid(alpha=0.3)
    fig.suptitle(title or f"Round-time prediction error ({errors.size} rounds)", fontsize=11)
    return save_figure(fig, path)
