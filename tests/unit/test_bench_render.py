"""The docs' speed table (bench/render.py) says what the record holds: each figure's value,
its same-run reference, its target and whether it is met, with the run's machine and date;
"not measured" where the record has no number."""

from __future__ import annotations

import pytest

from bench import render
from powertrip.app.report.blocks import replace_blocks

RECORD = {
    "benchmarks": {
        "fedavg": {
            "machine": "Made-up CPU 4 cores, Linux 6.1",
            "date": "2026-01-02 03:04:05 UTC",
            "command": "python bench/run.py --only fedavg",
            "figures": {"fedavg_vs_memcpy": 0.71, "memcpy_GBps": 12.5},
        },
        "startup": {
            "machine": "Other CPU 2 cores, Linux 6.2",
            "date": "2026-02-03 04:05:06 UTC",
            "command": "python bench/run.py --only startup",
            "figures": {"run_startup_s": 3.25, "torch_import_s": 1.5},
        },
        "demo": {
            "machine": "Other CPU 2 cores",
            "date": "2026-02-04",
            "command": "python bench/run.py --only demo --demo",
            "figures": {"demo_wall_s": "not measured (pass --demo)"},
        },
    }
}


def rows(text: str) -> dict[str, list[str]]:
    """figure key -> its cells."""
    out = {}
    for line in text.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[0].strip("`")] = cells
    return out


def test_a_figure_is_shown_with_its_reference_target_verdict_machine_and_date():
    table = rows(render.table(RECORD))
    assert table["fedavg_vs_memcpy"] == [
        "`fedavg_vs_memcpy`", "0.710", "memcpy of the same bytes: 12.5 GB/s", ">= 0.6", "yes",
        "Made-up CPU 4 cores", "2026-01-02",
    ]  # fmt: skip
    startup = table["run_startup_s"]
    assert startup[1:5] == ["3.2 s", "python -c 'import torch': 1.5 s", "<= 2 s", "no"]
    assert startup[5:] == ["Other CPU 2 cores", "2026-02-03"]


def test_a_figure_without_a_number_reads_not_measured_and_gets_no_verdict():
    table = rows(render.table(RECORD))
    assert table["demo_wall_s"][1] == "not measured" and table["demo_wall_s"][4] == ""
    assert table["train_vs_loop"][1] == "not measured" and table["train_vs_loop"][3] == ">= 1.5"
    assert len(table) == len(render.FIGURES)


def test_the_verdict_follows_the_targets_direction():
    fedavg, startup = render.BY_KEY["fedavg_vs_memcpy"], render.BY_KEY["run_startup_s"]
    assert (fedavg.met(0.6), fedavg.met(0.59)) == ("yes", "no")
    assert (startup.met(2.0), startup.met(2.01)) == ("yes", "no")
    assert render.BY_KEY["pinned_vs_native"].met(0.5) == ""  # no target, no verdict
    assert render.target_of("scale_overhead_ms_10000") == 50.0


def test_the_runs_list_names_each_benchmarks_machine_date_and_command():
    text = render.runs(RECORD)
    assert "* `fedavg`: Made-up CPU 4 cores, Linux 6.1; 2026-01-02 03:04:05 UTC; " in text
    assert "`python bench/run.py --only startup`" in text


@pytest.mark.parametrize("page", sorted(render.PAGES), ids=lambda p: p.name)
def test_the_speed_figures_in_the_docs_are_what_the_benchmark_record_says(page):
    """bench/RESULTS.md, docs/performance.md and docs/benchmarks.md show the committed
    record's figures (bench/render.py), never typed ones."""
    text = page.read_text()
    assert replace_blocks(text, render.pages()[page]) == text, f"{page.name}: run `make docs`"
    assert "| figure | value | reference (same run) | target | met? |" in text


def test_the_demo_profile_splits_its_wall_into_phases_and_outside_the_rounds():
    figures = {"demo_wall_s": 100.0, "demo_wall_round_s": 80.0, "demo_wall_train_s": 50.0,
               "demo_wall_eval_s": 20.0, "demo_wall_record_s": 2.0, "demo_rounds": 99,
               "demo_site_steps": 15210}  # fmt: skip
    text = render.demo_profile({"benchmarks": {"demo": {"figures": figures}}})
    assert "| training (dispatch to the last delta in) | 50.0 s | 50% |" in text
    assert "| the rest of the rounds (profiles, selection, aggregation) | 8.0 s | 8% |" in text
    assert "start-up and shutdown, the report) | 20.0 s | 20% |" in text
    assert "99 rounds, 15,210 site-steps." in text
    assert "No demo has been measured" in render.demo_profile({"benchmarks": {}})
