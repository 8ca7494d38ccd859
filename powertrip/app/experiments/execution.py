"""Executing planned runs: group by group, each group on one profiler + policy, under the
group's lock, PowerTrip first and every other arm cut off at a multiple of its time.

`execute` is the one place runs are made for `powertrip reproduce` (every phase); a run
whose summary says done with the same settings is skipped, an unfinished one starts afresh.
The set-ups the runs name come in with them (`variants`): this module declares none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powertrip.app.experiments.grouplock import GroupLock
from powertrip.app.experiments.plan import (
    arm_cap_h,
    arm_config,
    group_reference,
    is_done,
    variant_config,
)
from powertrip.app.experiments.suite import Arm, RunSpec, Variant
from powertrip.core.config import RunConfig


@dataclass
class RunLog:
    spec: RunSpec
    status: str  # ran | skipped | busy (another process holds its group) | failed
    seconds: float = 0.0
    message: str = ""


@dataclass
class Progress:
    """'run i/N' with an ETA from the mean duration of the runs made so far (phases add
    to N as they learn what they need)."""

    total: int = 0
    started: int = 0
    seconds: list[float] = dataclasses.field(default_factory=list)

    def line(self, label: str) -> str:
        self.started += 1
        text = f"run {self.started}/{self.total}: {label}"
        if self.seconds:
            mean = sum(self.seconds) / len(self.seconds)
            text += f" (ETA {_duration(mean * (self.total - self.started + 1))})"
        return text


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def execute(
    runs: Sequence[RunSpec],
    out: Path,
    base: RunConfig,
    *,
    variants: Mapping[str, Variant],
    budget_factor: float,
    force_workload: bool = False,
    show_progress: bool = True,
    log: Callable[[str], Any] = print,
    progress: Progress | None = None,
    ray: str | None = None,
    ray_gpus: float = 0.0,
) -> list[RunLog]:
    """Run what is not done yet, group by group (one profiler + policy per group), each run's
    set-up read from `variants` by name; with `ray` (an address), every group at once as a
    task on that Ray cluster, each asking for `ray_gpus` GPUs."""
    progress = progress if progress is not None else Progress()
    ray_address = ray
    logs: list[RunLog] = []
    groups: dict[tuple[str, int], list[RunSpec]] = {}
    for spec in runs:
        groups.setdefault((spec.variant, spec.seed), []).append(spec)
    todo: dict[tuple[str, int], tuple[RunConfig, list[RunSpec]]] = {}
    for (variant_name, seed), specs in groups.items():
        variant = variants[variant_name]
        config = variant_config(base, variant, seed, force_workload=force_workload)
        missing = [s for s in specs if not is_done(s.path(out), arm_config(config, s.arm, variant))]
        for spec in specs:
            if spec not in missing:
                logs.append(RunLog(spec, "skipped"))
                log(f"skip {variant_name} seed {seed} {spec.arm.name}: already done")
        if missing:
            todo[(variant_name, seed)] = (config, missing)
    progress.total += sum(len(m) for _, m in todo.values())
    if ray_address and todo:
        return logs + _execute_on_ray(
            ray_address, ray_gpus, todo, variants, out, budget_factor, progress, log
        )
    for (variant_name, seed), (config, missing) in todo.items():
        variant = variants[variant_name]
        group_dir = out / "runs" / variant_name / f"seed{seed}"
        with GroupLock(group_dir) as lock:
            missing = _claim(lock, out, variant, seed, config, missing, progress, logs, log)
            if missing:
                logs += _run_group(
                    out,
                    variant,
                    seed,
                    config,
                    missing,
                    budget_factor=budget_factor,
                    progress=progress,
                    log=log,
                    show_progress=show_progress,
                )
    return logs


def _claim(
    lock: GroupLock,
    out: Path,
    variant: Variant,
    seed: int,
    config: RunConfig,
    missing: list[RunSpec],
    progress: Progress,
    logs: list[RunLog],
    log: Callable[[str], Any],
) -> list[RunSpec]:
    """Take the group's lock and return what is still to run: nothing when another process
    holds it (its runs logged busy), else `missing` less the runs another process finished
    since the plan was made (logged skipped); the progress total follows both."""
    if not lock.acquire():
        progress.total -= len(missing)
        logs.extend(RunLog(spec, "busy") for spec in missing)
        log(f"busy {variant.name} seed {seed}: another reproduce ({lock.owner()}) runs it")
        return []
    done = [s for s in missing if is_done(s.path(out), arm_config(config, s.arm, variant))]
    progress.total -= len(done)
    logs.extend(RunLog(spec, "skipped") for spec in done)
    return [s for s in missing if s not in done]


def _run_group(
    out: Path,
    variant: Variant,
    seed: int,
    config: RunConfig,
    missing: Sequence[RunSpec],
    *,
    budget_factor: float,
    progress: Progress,
    log: Callable[[str], Any],
    show_progress: bool,
) -> list[RunLog]:
    """One group's runs, one after another on one profiler + policy (its lock held)."""
    from powertrip.app.experiments.launcher import Deployment
    from powertrip.app.experiments.runner import ChildExited, RunError, run_once

    logs: list[RunLog] = []
    variant_name = variant.name
    group_dir = out / "runs" / variant_name / f"seed{seed}"
    group_dir.mkdir(parents=True, exist_ok=True)
    config.write_yaml(group_dir / "base-config.yaml")
    with Deployment(group_dir / "base-config.yaml", group_dir / "logs") as deployment:
        for spec in missing:
            run_config = arm_config(config, spec.arm, variant)
            reference = group_reference(out, variant_name, seed)
            cap_h = arm_cap_h(spec.arm.name, reference, budget_factor if variant.budget else 0)
            if cap_h is not None:
                if not run_config.max_sim_hours or cap_h < run_config.max_sim_hours:
                    run_config.max_sim_hours = cap_h
            run_dir = spec.path(out)
            if run_dir.exists():
                shutil.rmtree(run_dir)  # an unfinished or outdated run starts afresh
            label = f"{variant_name}/s{seed}/{spec.arm.name}"
            log(progress.line(label))
            started = time.monotonic()
            try:
                run_once(run_config, run_dir, deployment, label=label, show_progress=show_progress)
            except ChildExited:
                raise  # a process died under the run: stop (exit 3), not the next run
            except RunError as exc:
                logs.append(RunLog(spec, "failed", time.monotonic() - started, str(exc)))
                log(f"FAILED {label}: {exc}")
                continue
            seconds = time.monotonic() - started
            progress.seconds.append(seconds)
            logs.append(RunLog(spec, "ran", seconds))
            log(f"ran {label} in {seconds:.0f} s")
    return logs


def _execute_on_ray(
    address: str,
    gpus: float,
    todo: Mapping[tuple[str, int], tuple[RunConfig, list[RunSpec]]],
    variants: Mapping[str, Variant],
    out: Path,
    budget_factor: float,
    progress: Progress,
    log: Callable[[str], Any],
) -> list[RunLog]:
    """Every group as one Ray task (make_group, below), holding each group's lock here
    while its task runs, so a local reproduce beside it leaves the group alone."""
    from powertrip.app.experiments import raycluster

    logs: list[RunLog] = []
    requests = []
    by_arm: dict[tuple[str, int, str], RunSpec] = {}
    with contextlib.ExitStack() as locks:
        for (variant_name, seed), (config, missing) in todo.items():
            variant = variants[variant_name]
            lock = locks.enter_context(GroupLock(out / "runs" / variant_name / f"seed{seed}"))
            missing = _claim(lock, out, variant, seed, config, missing, progress, logs, log)
            if not missing:
                continue
            config.write_yaml(out / "runs" / variant_name / f"seed{seed}" / "base-config.yaml")
            factor = budget_factor if variant.budget else 0.0
            request = group_request(out, variant, seed, config, missing, factor)
            requests.append((request, raycluster.resources_of(config, gpus)))
            by_arm.update({(variant_name, seed, spec.arm.name): spec for spec in missing})
        if not requests:
            return logs

        def landed(request: GroupRequest, result: dict[str, Any]) -> None:
            for arm, status, seconds, message in result["logs"]:
                spec = by_arm[(request.variant, request.seed, arm)]
                run_dir = spec.path(out)
                if run_dir.exists():
                    shutil.rmtree(run_dir)  # an unfinished or outdated run, as locally
                raycluster.write_back(result["files"].get(arm, {}), run_dir)
                logs.append(RunLog(spec, status, seconds, message))
                label = f"{request.variant}/s{request.seed}/{arm}"
                if status == "ran":
                    progress.seconds.append(seconds)
                    log(f"{progress.line(label)}: ran in {seconds:.0f} s on the cluster")
                else:
                    log(f"FAILED {label} on the cluster: {message}")

        with raycluster.connected(address, gpus) as ray:
            log(f"reproduce: {len(requests)} group(s) submitted to the Ray cluster at {address}")
            run_groups(ray, requests, landed)
    return logs


# ---- --ray: one Ray task per set-up/seed group ---------------------------------------------
@dataclass
class GroupRequest:
    """A reproduce group for a task: its settings, the runs to make (arm name, policy,
    params) and the summaries of the group's finished runs, which set the cut-off
    (plan.group_reference) as they do locally."""

    variant: str
    #: the set-up itself (its arm parameters), sent along: the task is handed no registry
    setup: Variant
    seed: int
    config_yaml: str
    arms: list[tuple[str, str, tuple[tuple[str, float], ...]]]
    budget_factor: float
    finished: dict[str, bytes]


def group_request(
    out: Path,
    variant: Variant,
    seed: int,
    config: RunConfig,
    specs: Sequence[RunSpec],
    factor: float,
) -> GroupRequest:
    from powertrip.app.experiments.raycluster import config_text

    group = out / "runs" / variant.name / f"seed{seed}"
    finished = {}
    for summary in sorted(group.glob("*/summary.json")):
        finished[summary.relative_to(group).as_posix()] = summary.read_bytes()
    arms = [(s.arm.name, s.arm.policy, tuple(s.arm.params)) for s in specs]
    return GroupRequest(variant.name, variant, seed, config_text(config), arms, factor, finished)


def make_group(request: GroupRequest) -> dict[str, Any]:
    """The task body: the group's runs, one after another on one profiler + policy as
    _run_group makes them locally, in a scratch OUT; returns each run's files
    and log line as {"files": {arm: {path: bytes}}, "logs": [(arm, status, s, message)]}."""
    from powertrip.app.experiments.raycluster import collect, read_back, write_back

    config = read_back(request.config_yaml, f"{request.variant}/seed{request.seed}")
    with tempfile.TemporaryDirectory(prefix="powertrip-ray-") as scratch:
        out = Path(scratch)
        group = out / "runs" / request.variant / f"seed{request.seed}"
        write_back(request.finished, group)
        specs = [
            RunSpec(request.variant, request.seed, Arm(name, policy, params))
            for name, policy, params in request.arms
        ]
        logs = _run_group(
            out, request.setup, request.seed, config, specs,
            budget_factor=request.budget_factor, progress=Progress(), log=lambda _: None,
            show_progress=False,
        )  # fmt: skip
        return {
            "files": {s.arm.name: collect(s.path(out)) for s in specs if s.path(out).is_dir()},
            "logs": [(r.spec.arm.name, r.status, r.seconds, r.message) for r in logs],
        }


def run_groups(
    ray: Any,
    requests: Sequence[tuple[GroupRequest, dict[str, float]]],
    on_done: Callable[[GroupRequest, dict[str, Any]], None],
) -> None:
    """Submit every group at once (each asking for the resources of the second item), hand each
    result to on_done as it comes; Ctrl-C cancels what is still running."""
    from powertrip.app.experiments.raycluster import submit_and_drain

    tasks = [
        (request, resources, f"{request.variant}/seed{request.seed}", request)
        for request, resources in requests
    ]
    submit_and_drain(ray, make_group, tasks, on_done)
