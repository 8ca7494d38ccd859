"""PNG plots of runs, comparisons and sweeps (matplotlib, Agg backend, no display)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from powertrip.report.results import RunResult

DPI = 110


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _hours(run: RunResult) -> np.ndarray:
    return run.columns["sim_time_s"] / 3600


def _clock_label(run: RunResult) -> str:
    clock = run.summary.get("clock") or run.config.get("clock", "simulated")
    return "simulated time (h)" if clock == "simulated" else "wall-clock time (h)"


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return path


def _target_line(ax, run: RunResult) -> None:
    target = run.summary.get("target_accuracy")
    if target is not None:
        ax.axhline(float(target), ls="--", color="grey", lw=1, label=f"target {float(target):.0%}")


def plot_run(run: RunResult, out_dir: str | Path) -> list[Path]:
    plt = _plt()
    out = Path(out_dir)
    paths = []
    t = _hours(run)

    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.plot(t, run.columns["accuracy"], marker=".", label=run.policy)
    _target_line(ax, run)
    ax.set(
        xlabel=_clock_label(run),
        ylabel="held-out accuracy",
        title=f"Accuracy vs time: {run.policy}",
    )
    ax.legend()
    paths.append(_save(fig, out / "accuracy_vs_time.png"))

    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.step(t, run.columns["k"], where="post")
    ax.set(
        xlabel=_clock_label(run), ylabel="sites selected (k)", title=f"k over time: {run.policy}"
    )
    ax.set_ylim(bottom=0)
    paths.append(_save(fig, out / "k_vs_time.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    rounds = run.columns["round"]
    compute, comm = run.columns["compute_s"], run.columns["comm_s"]
    wait = run.columns.get("wait_s", np.zeros_like(compute))
    ax.bar(rounds, compute, label="compute (straggler)")
    ax.bar(rounds, comm, bottom=compute, label="communication (straggler)")
    aggregation = run.columns["round_time_s"] - compute - comm
    ax.bar(rounds, aggregation, bottom=compute + comm, label="aggregation")
    ax.plot(rounds, wait, color="black", marker=".", lw=1, label="mean idle wait of the others")
    ax.set(xlabel="round", ylabel="seconds", title="Round time: the straggler's compute + communication")
    ax.legend(fontsize=8)
    paths.append(_save(fig, out / "round_breakdown.png"))

    fig, ax = plt.subplots(figsize=(5, 5))
    pred, actual = run.columns["predicted_round_time_s"], run.columns["round_time_s"]
    ax.scatter(pred, actual, s=14)
    hi = float(max(pred.max(initial=1), actual.max(initial=1))) * 1.05
    ax.plot([0, hi], [0, hi], color="grey", lw=1, ls="--", label="predicted = actual")
    ax.set(
        xlabel="predicted round time (s)",
        ylabel="actual round time (s)",
        title="Policy estimate vs clock",
        xlim=(0, hi),
        ylim=(0, hi),
    )
    ax.legend()
    paths.append(_save(fig, out / "predicted_vs_actual.png"))

    sites = run.summary.get("sites") or []
    if sites:
        selected = {s for row in run.sites for s in row}
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        dist = np.array([s["distance_miles"] for s in sites])
        power = np.array([s["power_fraction"] for s in sites])
        used = np.array([s["site_id"] in selected for s in sites])
        ax.scatter(dist[~used], power[~used], s=18, color="lightgrey", label="never selected")
        ax.scatter(
            dist[used], power[used], s=22, color="tab:orange", label="selected at least once"
        )
        ax.set(
            xlabel="distance to the aggregator (miles)",
            ylabel="power fraction p_i",
            title=f"Sites: power vs distance ({run.policy})",
        )
        ax.legend(fontsize=8)
        paths.append(_save(fig, out / "site_map.png"))
    return paths


def plot_comparison(comp_dir: str | Path, runs: Sequence[RunResult]) -> list[Path]:
    plt = _plt()
    out = Path(comp_dir)
    paths = []
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for run in runs:
        ax.plot(_hours(run), run.columns["accuracy"], label=run.policy, lw=1.4)
    if runs:
        _target_line(ax, runs[0])
        ax.set_xlabel(_clock_label(runs[0]))
    ax.set(ylabel="held-out accuracy", title="Accuracy vs time per policy")
    ax.legend(fontsize=8, ncol=2)
    paths.append(_save(fig, out / "accuracy_vs_time.png"))

    fig, ax = plt.subplots(figsize=(7, 0.5 * len(runs) + 1.5))
    names = [r.policy for r in runs][::-1]
    values = [r.time_to_target_h if r.reached else r.sim_time_h for r in runs][::-1]
    reached = [r.reached for r in runs][::-1]
    bars = ax.barh(
        names,
        values,
        color=["tab:blue" if ok else "white" for ok in reached],
        edgecolor="tab:blue",
        hatch=None,
    )
    for bar, ok, value in zip(bars, reached, values, strict=True):
        if not ok:
            bar.set_hatch("//")
        ax.text(
            bar.get_width(),
            bar.get_y() + bar.get_height() / 2,
            f" {value:.2f} h" if ok else f" not reached (> {value:.2f} h)",
            va="center",
            fontsize=8,
        )
    ax.set(xlabel="time to target accuracy (h)", title="Time-to-accuracy (paper Fig. 9)")
    ax.set_xlim(0, max(values, default=1) * 1.45)
    paths.append(_save(fig, out / "time_to_accuracy.png"))

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for run in runs:
        ax.step(_hours(run), run.columns["k"], where="post", label=run.policy, lw=1.2)
    ax.set(
        xlabel=_clock_label(runs[0]) if runs else "time (h)",
        ylabel="sites selected (k)",
        title="k over time (paper Fig. 10)",
    )
    ax.legend(fontsize=8, ncol=2)
    paths.append(_save(fig, out / "k_vs_time.png"))
    return paths


def plot_sweep(sweep_dir: str | Path, runs: Sequence[RunResult], ks: Sequence[int]) -> list[Path]:
    plt = _plt()
    pairs = sorted(zip(ks, runs, strict=True), key=lambda p: p[0])
    reached = [(k, r.time_to_target_h) for k, r in pairs if r.reached]
    missed = [(k, r.sim_time_h) for k, r in pairs if not r.reached]
    fig, ax = plt.subplots(figsize=(6.4, 4))
    if reached:
        ax.plot(
            [k for k, _ in reached], [t for _, t in reached], marker="o", label="time to target"
        )
        k_star, t_star = min(reached, key=lambda p: p[1])
        ax.axvline(k_star, color="tab:red", ls="--", lw=1, label=f"k* = {k_star}")
    if missed:
        ax.scatter(
            [k for k, _ in missed],
            [t for _, t in missed],
            facecolors="none",
            edgecolors="tab:grey",
            label="not reached (time run)",
        )
    ax.set(
        xlabel="sites per round (k)",
        ylabel="time to target (h)",
        title="Static-k sweep (paper Fig. 8)",
    )
    ax.legend()
    return [_save(fig, Path(sweep_dir) / "static_k_sweep.png")]
