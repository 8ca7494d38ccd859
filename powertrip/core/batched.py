"""Several virtual sites' local SGD in one forward/backward: `torch.func.vmap` over stacked
per-site weights.

Each site keeps its own weights, its own mini-batches (the same seeded `batch_indices` as the
plain loop) and its own SGD update `w -= lr * g`; only the kernels are shared, so the math is
the plain per-site loop's (`powertrip.core.training.train_local`) up to float summation order.
Why: on a CPU a site's batch of 20 leaves the cores half idle; stacking K sites turns K small
GEMMs/convolutions into one batched or grouped call (and on a GPU, one launch for K sites).

Where vmap has no batching rule for a model's ops (e.g. `nn.LSTM`, whose fused kernel takes
flat weights), `train_sites` falls back to the plain loop, once per model class, and says so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from powertrip.core.settings import TRAINERS
from powertrip.core.training import LocalResult, batch_indices, train_local
from powertrip.core.workloads.base import Workload

log = logging.getLogger(__name__)


# model classes for which vmap failed once in this process: use the loop from then on
_VMAP_UNSUPPORTED: set[str] = set()


@dataclass(frozen=True)
class SiteJob:
    """One site's share of a batched call: its own samples and seed."""

    x: np.ndarray
    y: np.ndarray
    seed: int


def vmap_supported(model: torch.nn.Module) -> bool:
    """False for models known to have no vmap batching rule (recurrent fused kernels)."""
    if type(model).__qualname__ in _VMAP_UNSUPPORTED:
        return False
    return not any(isinstance(m, torch.nn.RNNBase) for m in model.modules())


def train_sites_vmap(
    workload: Workload,
    model: torch.nn.Module,
    jobs: Sequence[SiteJob],
    *,
    steps: int,
    lr: float,
    batch_size: int,
    delta_device: str | torch.device | None = "cpu",
) -> list[LocalResult]:
    """Train len(jobs) sites from the model's current weights in lock-step; one delta each.

    The model is left unchanged. Every site does `steps` steps on batches of `batch_size`,
    so the per-site inputs stack into one (K, batch, ...) tensor per step. The deltas come
    back on `delta_device` (None: the model's device). A site worker sends them, so the CPU;
    a caller that averages them on a GPU saves K model-sized copies to the host a round.
    """
    from torch.func import functional_call, grad_and_value, vmap

    if any(len(job.y) == 0 for job in jobs):
        raise ValueError("a site with no training samples cannot train")
    model.train()
    names = [n for n, _ in model.named_parameters()]
    start = {n: p.detach() for n, p in model.named_parameters()}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    k = len(jobs)
    weights = {n: p.unsqueeze(0).repeat(k, *([1] * p.dim())) for n, p in start.items()}
    batches = [batch_indices(len(job.y), steps, batch_size, job.seed) for job in jobs]

    def site_loss(params, inputs, targets):
        logits = functional_call(model, (params, buffers), (inputs,))
        return torch.nn.functional.cross_entropy(logits, targets)

    step_fn = vmap(grad_and_value(site_loss))
    device = next(model.parameters()).device  # CPU or CUDA: batches follow the model
    losses = torch.zeros(k, dtype=torch.float64, device=device)
    for step in range(steps):
        # one (K, batch, ...) array per step, converted once (inputs/targets are elementwise)
        x = np.stack([job.x[b[step]] for job, b in zip(jobs, batches, strict=True)])
        y = np.stack([job.y[b[step]] for job, b in zip(jobs, batches, strict=True)])
        inputs = workload.inputs(x).to(device, non_blocking=True)
        targets = workload.targets(y).to(device, non_blocking=True)
        grads, loss = step_fn(weights, inputs, targets)
        with torch.no_grad():
            for n in names:
                weights[n].add_(grads[n], alpha=-lr)  # torch.optim.SGD's update, per site
        losses += loss.detach().double()
    results = []
    to = device if delta_device is None else torch.device(delta_device)
    for i, job in enumerate(jobs):
        delta = {}
        for key, value in model.state_dict().items():
            if key in weights:
                delta[key] = (weights[key][i] - start[key]).to(to).contiguous()
            else:  # buffers are not trained: their delta is zero, as in the loop
                delta[key] = torch.zeros_like(value, device=to)
        results.append(
            LocalResult(
                delta=delta,
                num_samples=len(job.y),
                mean_loss=float(losses[i]) / steps,
                steps=steps,
            )
        )
    return results


def train_sites(
    workload: Workload,
    model: torch.nn.Module,
    jobs: Sequence[SiteJob],
    *,
    steps: int,
    lr: float,
    batch_size: int,
    trainer: str = "loop",
    site_batch: int = 1,
    channels_last: bool = False,
    optimizer: str = "sgd",
    fused_sgd: bool = False,
    delta_device: str | torch.device | None = "cpu",
) -> list[LocalResult]:
    """Train every job from the model's current weights: `trainer` "loop" (one site after
    another, `train_local`) or "vmap" (`site_batch` sites per call, loop where vmap can't:
    models without vmap rules, and optimisers other than SGD, which the vmap path hand-codes).
    `channels_last` and `fused_sgd` apply to the loop (see `train_local`). The deltas come
    back on `delta_device` (None: the model's device)."""
    if trainer not in TRAINERS:
        raise ValueError(f"trainer must be one of {list(TRAINERS)}, got {trainer!r}")
    if site_batch < 1:
        raise ValueError(f"site_batch must be >= 1, got {site_batch}")
    results: list[LocalResult] = []
    if trainer == "vmap" and optimizer == "sgd" and vmap_supported(model):
        try:
            for first in range(0, len(jobs), site_batch):
                group = jobs[first : first + site_batch]
                results.extend(
                    train_sites_vmap(
                        workload,
                        model,
                        group,
                        steps=steps,
                        lr=lr,
                        batch_size=batch_size,
                        delta_device=delta_device,
                    )
                )
            return results
        except (RuntimeError, NotImplementedError) as exc:
            if results:  # a failure after some groups trained is not a missing vmap rule
                raise
            _VMAP_UNSUPPORTED.add(type(model).__qualname__)
            log.warning(
                "vmap training is not available for %s (%s); using the per-site loop",
                type(model).__qualname__,
                str(exc).splitlines()[0][:200],
            )
    to = next(model.parameters()).device if delta_device is None else torch.device(delta_device)
    for job in jobs:
        result = train_local(
            workload,
            model,
            job.x,
            job.y,
            steps=steps,
            lr=lr,
            batch_size=batch_size,
            seed=job.seed,
            channels_last=channels_last,
            optimizer=optimizer,
            fused_sgd=fused_sgd,
        )
        if to.type != "cpu":  # train_local's delta is on the CPU
            result = replace(result, delta={n: d.to(to) for n, d in result.delta.items()})
        results.append(result)
    return results
