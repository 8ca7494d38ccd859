"""run_startup_s: what one `powertrip run` costs outside its rounds (the CLI, the four
services started and stopped, registration, the report), as a user runs it: a 1-round run
of configs/demo.yaml, its wall minus its round's (wall.csv). Its reference in the same run
is the floor of any process that trains with torch, `python -c "import torch"`:
startup_vs_torch_import says how many such floors a run's start-up costs."""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT

REPEAT = 3


def _timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start


def one_run_s(out: Path) -> tuple[float, float]:
    """(the run's wall, its one round's wall) for a 1-round demo-configured run."""
    wall = _timed(
        [sys.executable, "-m", "powertrip", "run", "--config", "configs/demo.yaml",
         "--policy", "static", "--param", "k=3", "--max-rounds", "1", "--quiet",
         "--out", str(out)]
    )  # fmt: skip
    with (out / "wall.csv").open() as handle:
        round_s = sum(float(row["wall_round_s"]) for row in csv.DictReader(handle))
    return wall, round_s


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    print("startup: 1-round runs and torch imports, interleaved ...", flush=True)
    startup, torch_import = [], []
    for i in range(1 if args.quick else REPEAT):
        torch_import.append(_timed([sys.executable, "-c", "import torch"]))
        wall, round_s = one_run_s(work / f"startup-{i}")
        startup.append(wall - round_s)
    best = min(startup)
    return {
        "run_startup_s": best,
        "run_startup_runs": [round(s, 2) for s in startup],
        "torch_import_s": min(torch_import),
        "startup_vs_torch_import": best / min(torch_import),
    }
