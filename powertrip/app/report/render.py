"""`render(dir)`: work out what kind of output directory this is and write its report.

A run directory holds rounds.csv; a sweep holds k<N> run directories (and sweep.csv once
rendered); a comparison holds one run directory per policy.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from powertrip.app.report.comparison import time_to_target_text, write_comparison
from powertrip.app.report.comparison_plots import plot_accuracy_lines, plot_comparison, plot_sweep
from powertrip.app.report.html import (
    Section,
    Table,
    comparison_table,
    config_table,
    write_html,
)
from powertrip.app.report.result import ReportError, RunResult
from powertrip.app.report.run_plots import plot_run
from powertrip.app.report.rundir import is_run_dir, load_run, run_subdirs, sweep_subdirs
from powertrip.app.report.sweep import best_k, sweep_rows, write_sweep
from powertrip.core.clocks import clock_kind
from powertrip.core.config import RunConfig
from powertrip.core.policies import REGISTRY
from powertrip.core.profiles import population_regions, region_distances, site_id


def detect(dir: str | Path) -> str:
    """'run', 'sweep' or 'comparison'; ReportError when it is none of them."""
    path = Path(dir)
    if not path.is_dir():
        raise ReportError(f"{path}: not a directory")
    if is_run_dir(path):
        return "run"
    if (path / "sweep.csv").is_file() or sweep_subdirs(path):
        return "sweep"
    if run_subdirs(path):
        return "comparison"
    raise ReportError(
        f"{path}: not a run directory (no rounds.csv), a comparison (no subdirectories "
        "with rounds.csv) or a sweep (no sweep.csv or k<N> subdirectories)"
    )


def render(dir: str | Path, objective: str = "time") -> Path:
    """Render plots and report.html for a run, comparison or sweep directory (a comparison
    ranked by `objective`: time, energy, cost or carbon to target)."""
    path = Path(dir)
    kind = detect(path)
    if kind == "run":
        return render_run(path)
    if kind == "sweep":
        return render_sweep(path)
    return render_comparison(path, objective)


def render_run(run_dir: str | Path) -> Path:
    run = load_run(run_dir)
    images = plot_run(run, run.path)
    workload = run.summary.get("workload") or run.config.get("workload") or ""
    sections = [
        Section("Result", tables=[_result_table(run)], notes=_status_notes(run)),
        Section("Configuration", tables=[config_table(run.config, run.summary)]),
        *([Section("Sites", tables=[sites])] if (sites := regions_table(run)) else []),
        Section("Figures", images=images),
    ]
    return write_html(run.path, f"PowerTrip run: {run.name} on {workload}", sections)


def regions_table(run: RunResult) -> Table | None:
    """A `population: regions` run's sites: each one's region, city, distance from the
    aggregator, grid intensity (what its energy was charged) and the rounds it took part
    in; None for a synthetic population."""
    if run.config.get("population") != "regions":
        return None
    spec = RunConfig.from_mapping(dict(run.config)).population_spec()
    chosen, miles = population_regions(spec), region_distances(spec)
    rounds_in: dict[str, int] = {}
    for row in run.rounds:
        for site in row.get("sites") or []:
            rounds_in[site] = rounds_in.get(site, 0) + 1
    rows = [
        [site_id(i), r.name, f"{r.city} ({r.country_code})", f"{d:,.0f}", f"{r.g_co2_per_kwh:g}",
         str(rounds_in.get(site_id(i), 0))]
        for i, (r, d) in enumerate(zip(chosen, miles, strict=True))
    ]  # fmt: skip
    return Table(
        ["site", "region", "city", "miles from the aggregator", "g CO2/kWh", "rounds in"],
        rows,
        caption=f"Google Cloud regions, the aggregator in {spec.aggregator_region} "
        "(data/regions/regions.csv: annual grid intensities, GeoNames coordinates)",
    )


def render_runs(run_dirs: Sequence[Path]) -> None:
    """Every run's plots and report.html, in a process per core when there are several:
    matplotlib draws on one core, and a comparison's 9 runs (60 figures) took 9.7 s on 2
    cores one after the other. Spawned, not forked: the caller may hold gRPC threads."""
    workers = min(len(run_dirs), os.cpu_count() or 1)
    if workers < 2:
        for run_dir in run_dirs:
            render_run(run_dir)
        return
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_leave_ctrl_c_to_parent)
    try:
        for _ in pool.map(render_run, run_dirs):  # re-raises a run's error here
            pass
    finally:  # on an error or Ctrl-C: the runs being drawn finish (a second or two), no more
        pool.shutdown(wait=True, cancel_futures=True)


def _leave_ctrl_c_to_parent() -> None:
    """A terminal's Ctrl-C reaches the whole process group: the parent stops the pool (and
    says so); a worker that raised too would only print a second traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _status_notes(run: RunResult) -> list[str]:
    notes = []
    if run.summary.get("status") == "failed":
        notes.append(f"This run failed: {run.summary.get('message') or 'no message'}.")
    if note := clock_kind(run.clock).report_note:
        notes.append(note)
    return notes


def _result_table(run: RunResult) -> Table:
    s = run.summary
    target = run.target_accuracy
    rows = [
        ["policy", run.name],
        ["target accuracy", "-" if target is None else f"{target * 100:g}%"],
        ["time to target (h)", time_to_target_text(run.time_to_target_s, run.sim_time_s)],
        ["rounds", str(s.get("rounds", len(run.rounds)))],
        ["final accuracy", _fmt(s.get("final_accuracy"))],
        ["best accuracy", _fmt(s.get("best_accuracy"))],
        ["time run (h)", f"{run.sim_time_s / 3600:.3f}"],
        ["stopped because", str(s.get("stopped_reason") or "-")],
    ]
    if run.rounds:
        rows.append(["mean k", f"{float(np.nanmean(run.column('k'))):.1f}"])
    for label, key, digits in (
        ("energy (kWh; to target)", "energy_kwh", 3),
        ("egress cost ($; to target)", "egress_usd", 2),
        ("carbon (kg CO2; to target)", "carbon_kg", 3),
    ):
        if s.get(key) is not None:
            at = s.get(FOOTPRINT_TO_TARGET[key])
            to = "-" if at is None else f"{at:.{digits}f}"
            rows.append([label, f"{s[key]:.{digits}f}; {to}"])
    if s.get("delta_encoding"):  # runs whose deltas crossed encoded (int8)
        error = s.get("delta_encoding_error") or {}
        mean, most = error.get("mean"), error.get("max")
        text = "-" if mean is None else f"mean {mean:.2e}, max {most:.2e}"
        rows.append([f"{s['delta_encoding']} deltas: error vs fp32 (relative norm)", text])
    meters = s.get("energy_meters") or {}
    for source in sorted(set(meters.values())):  # what measured energy, not the model's watts
        sites = sorted(site for site, by in meters.items() if by == source)
        rows.append([f"energy measured by {source}", f"{len(sites)} site(s): {', '.join(sites)}"])
    return Table(["", "value"], rows)


#: summary.json's run totals and their to-target counterparts
FOOTPRINT_TO_TARGET = {
    "energy_kwh": "energy_to_target_kwh",
    "egress_usd": "egress_usd_to_target",
    "carbon_kg": "carbon_kg_to_target",
}


def _fmt(value: Any) -> str:
    return "-" if value is None or value != value else f"{float(value):.4f}"


def spec_label(run_dir: Path, config: dict) -> str:
    """The `compare --policies` text a run directory was made from (`static:k=3` for
    static-k3), so a policy run twice with other parameters keeps its row's name when the
    report is rendered again; "" where the directory is the policy's name. The parameters
    are those that differ from the policy's defaults today."""
    policy = str(config.get("policy") or "")
    if not policy or run_dir.name == policy:
        return ""
    cls = REGISTRY.get(policy)
    defaults = cls.Params().as_numbers() if cls is not None else {}
    params = config.get("policy_params") or {}
    moved = [f"{k}={float(v):g}" for k, v in params.items() if defaults.get(k) != v]
    return ":".join([policy, *moved]) if moved else run_dir.name


def render_comparison(comp_dir: str | Path, objective: str = "time") -> Path:
    path = Path(comp_dir)
    runs = [load_run(d) for d in run_subdirs(path)]
    for run in runs:
        run.label = spec_label(run.path, run.config)
    if not runs:
        raise ReportError(f"{path}: no run directories (subdirectories with rounds.csv)")
    render_runs([run.path for run in runs])
    csv_path = write_comparison(path, runs, objective)
    images = plot_comparison(path, runs)
    first = runs[0]
    sections = [
        Section(
            "Comparison",
            tables=[comparison_table(runs, objective)],
            notes=[*_budget_notes(runs), f"Also written to {csv_path.name}."],
        ),
        Section("Figures", images=images),
        Section(
            "Configuration (shared by all runs)",
            tables=[config_table(first.config, first.summary, skip=("max_sim_hours",))],
        ),
        Section(
            "Per-policy reports",
            links=[(run.name, f"{run.path.name}/report.html") for run in runs],
        ),
    ]
    workload = first.summary.get("workload") or first.config.get("workload") or ""
    return write_html(path, f"PowerTrip comparison on {workload}", sections)


def _budget_notes(runs: list[RunResult]) -> list[str]:
    """The time budget each run had: a fair comparison gives every policy the same one, and
    a budget-factor cut-off gives later policies less (the config table leaves it out)."""
    caps = [float(run.config.get("max_sim_hours") or 0.0) for run in runs]
    if not any(caps):
        return ["No time budget: each run ended at the target or its round cap."]
    if len(set(caps)) == 1:
        return [
            f"Every policy had the same time budget of {caps[0]:g} h; a run stops before a "
            "round that would end after it."
        ]
    per_run = ", ".join(
        f"{run.name} {cap:.3f} h" if cap else f"{run.name} none"
        for run, cap in zip(runs, caps, strict=True)
    )
    return [
        f"Time budget per policy: {per_run} (a budget factor cuts later policies off relative "
        "to the best time to target before them)."
    ]


def render_sweep(sweep_dir: str | Path) -> Path:
    path = Path(sweep_dir)
    found = sweep_subdirs(path)
    if not found:
        raise ReportError(f"{path}: a sweep needs k<N> run directories (e.g. k10/rounds.csv)")
    ks = [k for k, _ in found]
    runs = [load_run(d, label=f"k={k}") for k, d in found]
    render_runs([d for _, d in found])
    csv_path = write_sweep(path, runs, ks)
    images = plot_sweep(path, runs, ks)
    images.append(plot_accuracy_lines(runs, path / "accuracy_vs_time.png"))
    k_star = best_k(runs, ks)
    rows = sweep_rows(runs, ks)
    table = Table(
        ["k", "time to target (h)", "rounds", "final acc", "reached"],
        [
            [
                str(r["k"]),
                time_to_target_text(r["time_to_target_s"], r["sim_time_s"]),
                str(r["rounds"]),
                _fmt(r["final_accuracy"]),
                "yes" if r["reached"] else "no",
            ]
            for r in rows
        ],
        caption="Static top-k, one run per k; k* highlighted.",
        highlight={i for i, r in enumerate(rows) if r["k"] == k_star},
    )
    verdict = (
        f"k* = {k_star}: the fastest static k to the target."
        if k_star is not None
        else "No k reached the target, so there is no k*."
    )
    first = runs[0]
    sections = [
        Section("Sweep", notes=[verdict, f"Also written to {csv_path.name}."], tables=[table]),
        Section("Figures", images=images),
        Section(
            "Configuration (shared by all runs)",
            tables=[config_table(first.config, first.summary)],
        ),
        Section(
            "Per-k reports",
            links=[
                (run.name, f"{d.name}/report.html") for run, (_, d) in zip(runs, found, strict=True)
            ],
        ),
    ]
    workload = first.summary.get("workload") or first.config.get("workload") or ""
    return write_html(path, f"PowerTrip static-k sweep on {workload}", sections)
