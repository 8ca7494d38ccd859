"""tau, the ideal time of one site's local work at full power, measured rather than given.

The paper's §5.1 charges a site of power p an effective training time T/p, where T is its
"ideal training time (at 100% power)", and gives no value for T. By default (`tau_source:
fixed`) a run uses `tau_s` as given: the workload's default (60 s for the paper's workloads,
OUR CHOICE) or the run's own. `tau_source: measured` takes T from the work itself: the
median time of one optimiser step of the workload's real model and batch on the device the
sites train on, times the steps a site trains per round. It is measured once at run start
(the aggregator, before round 1) and then charged by the clock and estimated by the
policies like a given tau. Simulated times then depend on the machine that measured it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported lazily by powertrip.core.training
    import torch

    from powertrip.core.workloads.base import Workload

#: steps run and not timed first (allocations, kernel selection, caches)
WARMUP_STEPS = 3
#: steps timed; their median is the step time
TIMED_STEPS = 20


def measured_tau_s(step_times: Sequence[float], local_steps: int) -> float:
    """tau: the median of the timed steps' seconds times the steps of a site's local work."""
    if local_steps < 1:
        raise ValueError(f"local_steps must be >= 1, got {local_steps}")
    times = [float(t) for t in step_times]
    if not times:
        raise ValueError("no step times to measure tau from")
    if not all(np.isfinite(t) and t > 0 for t in times):
        raise ValueError(f"step times must be finite and > 0, got {times}")
    return statistics.median(times) * local_steps


def time_steps(
    workload: Workload,
    model: torch.nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    lr: float,
    batch_size: int,
    seed: int = 0,
    warmup: int = WARMUP_STEPS,
    steps: int = TIMED_STEPS,
    timer: Callable[[], float] = time.perf_counter,
    channels_last: bool = False,
    optimizer: str = "sgd",
    fused_sgd: bool = False,
) -> list[float]:
    """Seconds of each of `steps` optimiser steps after `warmup` untimed ones, run by the
    training code sites run (`powertrip.core.training.train_local`) on `model` where it is; the
    model's weights are left as they were."""
    from powertrip.core.training import train_local

    if warmup < 0 or steps < 1:
        raise ValueError(f"need warmup >= 0 and steps >= 1, got {warmup} and {steps}")
    stamps = [timer()]
    train_local(
        workload,
        model,
        x,
        y,
        steps=warmup + steps,
        lr=lr,
        batch_size=batch_size,
        seed=seed,
        channels_last=channels_last,
        optimizer=optimizer,
        fused_sgd=fused_sgd,
        on_step=lambda: stamps.append(timer()),
    )
    return [b - a for a, b in zip(stamps[warmup:], stamps[warmup + 1 :], strict=False)]
