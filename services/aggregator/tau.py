"""tau_source "measured": the run's tau_s measured once, before round 1 (core/steptime.py).

The aggregator measures on this host with the device a site worker picks by default
(`POWERTRIP_SITE_WORKER_DEVICE`, formerly `POWERTRIP_DEVICE`, else CUDA when visible, else
the CPU) and the workers' torch threads
(`threads_per_worker`), with the loop trainer's settings (channels_last, fused_sgd): in the
embedded deployment that is the machine and device the sites train on. The value then
stands in the run's tau_s, so the clock charges it, the policies estimate with it and
config.yaml records it; a resumed run keeps the value its config.yaml recorded.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

from powertrip.core import runfiles
from powertrip.core.config import RunConfig
from powertrip.core.envnames import getenv
from powertrip.core.steptime import TIMED_STEPS, WARMUP_STEPS, measured_tau_s, time_steps
from powertrip.core.training import resolve_device
from powertrip.core.workloads import get_workload

log = logging.getLogger("aggregator")


def run_with_tau(
    run: RunConfig,
    out_dir: Path,
    *,
    resume: bool = False,
    device: str | None = None,
    timer: Callable[[], float] = time.perf_counter,
) -> RunConfig:
    """`run` with its tau_s: unchanged under tau_source fixed or when tau_s is set; under
    measured, the value a resumed run's config.yaml recorded, else measured now."""
    if run.tau_source != "measured" or run.tau_s is not None:
        return run
    if resume:
        recorded = _recorded_tau_s(out_dir / runfiles.CONFIG)
        if recorded is not None:
            log.info("tau_s %.4g s: measured when the run started (config.yaml)", recorded)
            return dataclasses.replace(run, tau_s=recorded)
    device = device or resolve_device(getenv("POWERTRIP_SITE_WORKER_DEVICE", "auto") or "auto")
    steps = measure_step_times(run, device, timer)
    tau = measured_tau_s(steps, run.local_steps or 1)
    log.info(
        "tau_s %.4g s measured: median step %.4g s of %d (after %d warm-up) x %d local steps "
        "on %s",
        tau, tau / (run.local_steps or 1), len(steps), WARMUP_STEPS, run.local_steps, device,
    )  # fmt: skip
    return dataclasses.replace(run, tau_s=tau)


def measure_step_times(
    run: RunConfig, device: str, timer: Callable[[], float] = time.perf_counter
) -> list[float]:
    """Seconds per optimiser step of the run's workload, model and batch on `device`."""
    workload = get_workload(run.workload, run.peft)
    train = workload.load(run.data_dir, run.seed).train
    threads = torch.get_num_threads()
    torch.set_num_threads(run.threads_per_worker)
    try:
        torch.manual_seed(run.seed)
        model = workload.build_model(device).to(device)
        return time_steps(
            workload,
            model,
            train.x,
            train.y,
            lr=float(run.lr or 0.0),
            batch_size=int(run.batch_size or 1),
            seed=run.seed,
            warmup=WARMUP_STEPS,
            steps=TIMED_STEPS,
            timer=timer,
            channels_last=run.channels_last,
            optimizer=workload.defaults.optimizer,
            fused_sgd=run.fused_sgd,
        )
    finally:
        torch.set_num_threads(threads)


def _recorded_tau_s(path: Path) -> float | None:
    try:
        stored = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    value = stored.get("tau_s") if isinstance(stored, dict) else None
    return float(value) if isinstance(value, int | float) and value > 0 else None
