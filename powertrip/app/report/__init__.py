"""Plots and a static HTML report for finished run, comparison and sweep directories.

Kept apart from the services so a report can be re-rendered from files alone, long after
the run and on a machine without the training stack.
"""

from powertrip.app.report.comparison import comparison_rows, format_table, write_comparison
from powertrip.app.report.comparison_plots import plot_comparison, plot_sweep
from powertrip.app.report.html import Section, Table, write_html
from powertrip.app.report.render import detect, render
from powertrip.app.report.result import ReportError, RunResult
from powertrip.app.report.run_plots import plot_run
from powertrip.app.report.rundir import load_run
from powertrip.app.report.sweep import best_k, sweep_rows, write_sweep

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
