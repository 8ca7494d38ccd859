"""`--ray ADDRESS` of `run`, `compare` and `sweep`: where the work goes on a Ray cluster.
`run` places its site workers there as actors (rayworkers.py) and keeps the other services
here; compare and sweep make whole runs there as tasks (raycluster.py), reusing finished
runs as they do locally."""

from __future__ import annotations

import argparse
import contextlib
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from powertrip.app.experiments.reuse import PlannedRun, check_run_dir, previous_run
from powertrip.app.experiments.runner import RunOutcome
from powertrip.core.config import RunConfig


def ray_gpus(args: argparse.Namespace) -> float:
    return float(getattr(args, "ray_gpus", 0.0) or 0.0)


def ray_placement(args: argparse.Namespace, config: RunConfig, stack: contextlib.ExitStack):
    """`run --ray ADDRESS`: the site workers as Ray actors (rayworkers), the cluster joined
    for as long as `stack` lasts; None without --ray."""
    if not getattr(args, "ray", None):
        return None
    from powertrip.app.experiments import raycluster, rayworkers

    gpus = ray_gpus(args)
    ray = stack.enter_context(raycluster.connected(args.ray, gpus))
    placement = rayworkers.RayWorkers(
        ray, cpus_per_worker=config.train_threads, gpus_per_worker=gpus
    )
    stack.callback(placement.close)
    return placement


def runs_on_ray(
    out: Path,
    args: argparse.Namespace,
    runs: Sequence[PlannedRun],
    show: Callable[[RunOutcome, str], None],
) -> None:
    """Make `runs` as tasks on the Ray cluster at args.ray, all at once (raycluster.py);
    finished runs are reused as locally, and any other (unfinished or with other
    settings) is made again from its start: its checkpoint stayed on the node that made it.
    `show` prints each run's summary line, with its label, as it is reused or finishes."""
    from powertrip.app.experiments import raycluster

    base_yaml = (out / "base-config.yaml").read_text()
    jobs = []
    for planned in runs:
        state, found = previous_run(planned.run_dir, planned.config)
        if state == "done" and isinstance(found, dict):
            print(f"{planned.name}: already finished in {planned.run_dir}, reused")
            show(RunOutcome(planned.run_dir, found), planned.label)
            continue
        if state != "none":
            check_run_dir(planned.run_dir)
            why = found if isinstance(found, str) else "an unfinished run"
            print(f"{planned.name}: {planned.run_dir} holds {why}; making it again on the cluster")
            shutil.rmtree(planned.run_dir)
        request = raycluster.RunRequest(
            planned.name, raycluster.config_text(planned.config), base_yaml, planned.label
        )
        jobs.append(raycluster.Submitted(request, planned.run_dir, planned.config))
    if not jobs:
        return
    gpus = ray_gpus(args)
    with raycluster.connected(args.ray, gpus) as ray:
        print(f"{len(jobs)} run(s) submitted to the Ray cluster at {args.ray}")
        raycluster.run_all(
            ray,
            jobs,
            lambda job, summary: show(RunOutcome(job.run_dir, summary), job.request.label),
            gpus,
        )
