"""Plots and a static HTML report for finished run, comparison and sweep directories.

Kept apart from the services so a report can be re-rendered from files alone, long after
the run and on a machine without the training stack.
"""

from powertrip.report.data import (
    ReportError,
    RunResult,
    best_k,
    comparison_rows,
    format_table,
    load_run,
    sweep_rows,
    write_comparison,
    write_sweep,
)
from powertrip.report.html import Section, Table, write_html
from powertrip.report.plots import plot_comparison, plot_run, plot_sweep
from powertrip.report.render import detect, render

__all__ = [
    "ReportError",
    "RunResult",
    "Section",
    "Table",
    "best_k",
    "comparison_rows",
    "detect",
    "format_table",
    "load_run",
    "plot_comparison",
    "plot_run",
    "plot_sweep",
    "render",
    "sweep_rows",
    "write_comparison",
    "write_html",
    "write_sweep",
]
