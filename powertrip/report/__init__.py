"""Reports: plots and report.html from finished run, comparison and sweep directories."""

from __future__ import annotations

import re
from pathlib import Path

from powertrip.report.html import setup_rows, table, write_html
from powertrip.report.plots import plot_comparison, plot_run, plot_sweep
from powertrip.report.results import ReportError, RunResult, child_runs, is_run_dir, load_run
from powertrip.report.tables import comparison_rows, format_table, write_comparison, write_sweep

SWEEP_DIR = re.compile(r"^k(\d+)$")


def render(directory: str | Path) -> Path:
    """Detect a run, comparison or sweep directory and render everything for it."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ReportError(f"{directory}: not a directory")
    if is_run_dir(directory):
        run = load_run(directory)
        images = plot_run(run, directory)
        summary = {k: v for k, v in run.summary.items() if k != "sites"}
        sections = [
            ("Set-up", table(setup_rows(run.config, run.summary))),
            ("Summary", table([{"key": k, "value": v} for k, v in summary.items()])),
        ]
        return write_html(directory, f"PowerTrip run: {run.policy}", sections, images)
    children = child_runs(directory)
    if not children:
        raise ReportError(f"{directory}: no rounds.csv here or in its subdirectories")
    runs = [load_run(p) for p in children]
    for run in runs:
        render(run.path)
    sweep = [SWEEP_DIR.match(p.name) for p in children]
    if all(sweep):
        ks = [int(m.group(1)) for m in sweep]
        _, k_star = write_sweep(directory, runs, ks)
        images = plot_sweep(directory, runs, ks)
        rows = [
            {
                "k": k,
                "time to target (h)": f"{r.time_to_target_h:.3f}" if r.reached else "not reached",
                "rounds": r.summary.get("rounds"),
            }
            for k, r in sorted(zip(ks, runs, strict=True))
        ]
        sections = [
            ("Set-up", table(setup_rows(runs[0].config, runs[0].summary))),
            (f"Static-k sweep: k* = {k_star}", table(rows)),
        ]
        return write_html(directory, "PowerTrip static-k sweep", sections, images)
    write_comparison(directory, runs)
    images = plot_comparison(directory, runs)
    sections = [
        ("Set-up", table(setup_rows(runs[0].config, runs[0].summary))),
        ("Time to accuracy", table(comparison_rows(runs))),
        (
            "Per policy",
            "<ul>"
            + "".join(f'<li><a href="{r.path.name}/report.html">{r.policy}</a></li>' for r in runs)
            + "</ul>",
        ),
    ]
    return write_html(directory, "PowerTrip policy comparison", sections, images)


__all__ = [
    "ReportError",
    "RunResult",
    "format_table",
    "load_run",
    "plot_comparison",
    "plot_run",
    "plot_sweep",
    "render",
    "write_comparison",
    "write_sweep",
]
