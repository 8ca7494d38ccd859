"""run_startup_s: what one `powertrip run` costs outside its rounds (the CLI, the four
services started and stopped, registration, the report), as a user runs it: a 1-round run
of configs/demo.yaml, its wall minus its round's (wall.csv). Its reference in the same run
is the floor of any process that trains with torch, `python -c "import torch"`:
startup_vs_torch_import says how many such floors a run's start-up costs.

Where it goes: run_before_round1_s, from the command's start to its first round's start
(the aggregator's log stamps the end of round 1, wall.csv gives its length), and
run_after_rounds_s, from the end of the last round to the command's exit (services
stopped, the report drawn)."""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from bench.common import ROOT

REPEAT = 3


def _timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start


#: the aggregator's line at the end of a round: its log time and the round's number
ROUND_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) aggregator INFO round (\d+):")


def round_ends(log: Path) -> dict[int, float]:
    """{round: epoch seconds at which the aggregator logged its end}."""
    ends = {}
    for line in log.read_text(errors="replace").splitlines():
        if match := ROUND_LINE.match(line):
            stamp = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f")
            ends[int(match[2])] = stamp.timestamp()  # logging stamps local time, as here
    return ends


def one_run(out: Path) -> dict[str, float]:
    """A 1-round demo-configured run: its wall, its round's wall, and the time before its
    round and after it."""
    began = time.time()
    wall = _timed(
        [sys.executable, "-m", "powertrip", "run", "--config", "configs/demo.yaml",
         "--policy", "static", "--param", "k=3", "--max-rounds", "1", "--quiet",
         "--out", str(out)]
    )  # fmt: skip
    with (out / "wall.csv").open() as handle:
        rounds = [float(row["wall_round_s"]) for row in csv.DictReader(handle)]
    ends = round_ends(out / "logs" / "aggregator.log")
    first, last = ends[min(ends)], ends[max(ends)]
    return {
        "wall": wall,
        "rounds": sum(rounds),
        "before": first - rounds[0] - began,
        "after": began + wall - last,
    }


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    print("startup: 1-round runs and torch imports, interleaved ...", flush=True)
    runs, torch_import = [], []
    for i in range(1 if args.quick else REPEAT):
        torch_import.append(_timed([sys.executable, "-c", "import torch"]))
        runs.append(one_run(work / f"startup-{i}"))
    startup = [run["wall"] - run["rounds"] for run in runs]
    best = min(range(len(runs)), key=startup.__getitem__)
    return {
        "run_startup_s": startup[best],
        "run_startup_runs": [round(s, 2) for s in startup],
        "run_before_round1_s": runs[best]["before"],
        "run_after_rounds_s": runs[best]["after"],
        "torch_import_s": min(torch_import),
        "startup_vs_torch_import": startup[best] / min(torch_import),
    }
