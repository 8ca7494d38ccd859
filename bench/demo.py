"""demo_wall_s, demo_vs_loop and demo_vs_work: the default `make demo` (only with --demo:
minutes).

demo_vs_loop is the demo's wall after set-up over the time the bare loop (bench/train.py)
needs for the demo's own site-steps (sum over every run's rounds of k x local steps), the
loop's rate measured just before and just after the demo in the same run. Below 1 means the
whole demo, start-up, evaluation and reports included, beat a plain loop doing its training.
demo_vs_work sets it against the loop's time plus a bare forward pass over the samples the
demo evaluated (every round's eval_samples), at the rate measured in the same run: what the
demo's work costs written plainly, so what is above 1 is the system's own overhead.
The demo's wall is also split into where it went, from every run's wall.csv."""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from bench.common import ROOT

#: wall.csv columns summed over the demo's rounds (the rest is start-up, shutdown, reports)
PHASES = ("wall_train_s", "wall_eval_s", "wall_record_s")
LOOP_SITES = list(range(20))  # the reference's sites: 20 FEMNIST sites x 10 steps


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


def demo_work(demo_out: Path) -> dict[str, float]:
    """Site-steps the demo trained and its rounds' wall by phase, from its runs' files."""
    site_steps = rounds = eval_samples = 0
    phases = dict.fromkeys(("wall_round_s", *PHASES), 0.0)
    for rounds_csv in sorted(demo_out.rglob("rounds.csv")):
        run = rounds_csv.parent
        config = yaml.safe_load((run / "config.yaml").read_text()) or {}
        steps = int(config.get("local_steps") or 1)
        for row in csv.DictReader(rounds_csv.open()):
            site_steps += int(row["k"]) * steps
            rounds += 1
            eval_samples += int(config.get("eval_samples") or 0)
        wall = run / "wall.csv"
        if wall.is_file():
            for row in csv.DictReader(wall.open()):
                for key in phases:
                    phases[key] += float(row.get(key) or 0.0)
    return {"site_steps": site_steps, "rounds": rounds, "eval_samples": eval_samples, **phases}


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    """Only with --demo (it takes minutes); otherwise the table says how to get it."""
    if not args.demo:
        return {"demo_wall_s": "not measured (pass --demo)"}
    from bench.train import bare_forward_samples_per_s, bare_loop_steps_per_s

    cores = os.cpu_count() or 1
    print("demo: bare loop and forward pass, make demo (minutes), again ...", flush=True)
    before = bare_loop_steps_per_s(LOOP_SITES, 10, cores)
    forward_before = bare_forward_samples_per_s(cores)
    wall = demo_wall_s(work)
    after = bare_loop_steps_per_s(LOOP_SITES, 10, cores)
    forward_after = bare_forward_samples_per_s(cores)
    done = demo_work(work / "demo-run")
    loop_rate = (before + after) / 2
    loop_s = done["site_steps"] / loop_rate
    eval_s = done["eval_samples"] / ((forward_before + forward_after) / 2)
    out = {
        "demo_wall_s": wall,
        "demo_site_steps": done["site_steps"],
        "demo_rounds": done["rounds"],
        "demo_loop_site_steps_per_s": [round(before, 2), round(after, 2)],
        "demo_loop_equivalent_s": loop_s,
        "demo_vs_loop": wall / loop_s,
        "demo_eval_samples": done["eval_samples"],
        "demo_forward_samples_per_s": [round(forward_before), round(forward_after)],
        "demo_work_equivalent_s": loop_s + eval_s,
        "demo_vs_work": wall / (loop_s + eval_s),
        "demo_train_rate_site_steps_per_s": done["site_steps"] / max(done["wall_train_s"], 1e-9),
    }
    for key in ("wall_round_s", *PHASES):
        out[f"demo_{key}"] = done[key]
    out["demo_outside_rounds_s"] = wall - done["wall_round_s"]
    return out
