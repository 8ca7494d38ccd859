"""demo_wall_s: wall time of the default `make demo` comparison (only with --demo: minutes)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from pathlib import Path

from bench.common import ROOT


def demo_wall_s(out: Path) -> float:
    demo_out = out / "demo-run"
    shutil.rmtree(demo_out, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run(
        ["make", "demo", f"DEMO_OUT={demo_out}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    """Only with --demo (it takes minutes); otherwise the table says how to get it."""
    if args.demo:
        print("demo: make demo (minutes) ...", flush=True)
        return {"demo_wall_s": demo_wall_s(work)}
    return {"demo_wall_s": "not measured (pass --demo)"}
