"""`powertrip reproduce --jobs N`: N-1 helper processes beside the command itself.

Each helper is the same command with `--runs-only`: it runs the planned runs group by group
and stops; the group locks (`grouplock.py`) keep every group in one process. The command
itself runs groups too, waits for its helpers, then does what needs every group finished:
the sweep's refinement, the arms that need another set-up's k*, and the reports.

Why several processes help on a 2-core machine: a run is not all parallel work. A small-k
round trains one or two sites, the held-out evaluation and the run's start-up are mostly one
thread, and the services wait on each other over gRPC; a second group fills those gaps.
Helpers are children that end with the command (PR_SET_PDEATHSIG) and that a signal stops,
like its services.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from powertrip.app.experiments.launcher import ServiceProcess, start_process, stop_services

#: options of the command that a helper must not repeat (with or without a value)
_DROP_WITH_VALUE = ("--jobs", "--summary")
_DROP_FLAGS = ("--report-only", "--runs-only", "--quiet")


def helper_argv(argv: Sequence[str]) -> list[str]:
    """The command's arguments for a helper: --jobs, --summary and --report-only dropped,
    `--jobs 1 --runs-only --quiet` added."""
    kept: list[str] = []
    skip_next = False
    for arg in argv:
        if skip_next:
            skip_next = False
            continue
        name = arg.split("=", 1)[0]
        if name in _DROP_WITH_VALUE:
            skip_next = "=" not in arg
            continue
        if name in _DROP_FLAGS:
            continue
        kept.append(arg)
    return [*kept, "--jobs", "1", "--runs-only", "--quiet"]


def start_helpers(argv: Sequence[str], count: int, out: Path) -> list[ServiceProcess]:
    """`count` helpers, each logging to OUT/jobs/helper-<i>.log."""
    args = helper_argv(argv)
    return [
        start_process(
            f"reproduce helper {i}", "powertrip.app.cli", args, out / "jobs" / f"helper-{i}.log"
        )
        for i in range(1, count + 1)
    ]


def wait_helpers(
    helpers: Sequence[ServiceProcess], log: Callable[[str], Any] = print, poll_s: float = 1.0
) -> list[str]:
    """Wait for every helper; returns a line per helper that did not end with 0 (its exit
    and the tail of its log)."""
    if any(h.alive() for h in helpers):
        log(f"reproduce: waiting for {sum(h.alive() for h in helpers)} helper(s) to finish")
    while any(h.alive() for h in helpers):
        time.sleep(poll_s)
    stop_services(helpers)  # reaps them and drops them from the live list
    return [h.exit_report() for h in helpers if h.process.returncode != 0]
