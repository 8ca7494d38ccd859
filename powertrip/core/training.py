"""Local training and evaluation with torch: what a site does with a task, and how the
aggregator scores the global model. Pure with respect to their inputs and the seed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from powertrip.core.fused_sgd import sgd_in_backward
from powertrip.core.workloads.base import Workload


@dataclass
class LocalResult:
    delta: dict[str, torch.Tensor]  # trained - global, per state-dict key
    num_samples: int
    mean_loss: float
    steps: int


OPTIMIZERS = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}


class PlainSGD:
    """SGD without momentum or weight decay on CPU parameters: `param.add_(grad, alpha=-lr)`,
    the very update torch.optim.SGD(params, lr) makes there (its single-tensor path), so the
    bytes are the same (tests/unit/test_workloads_models.py). Why not torch's class: building the
    first torch.optim.Optimizer in a process imports torch._dynamo, 1.4 s that was the
    first training step of every site worker of every run."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float):
        self.params = list(params)
        self.lr = lr

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.params:
            param.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for param in self.params:
            if param.grad is not None:
                param.add_(param.grad, alpha=-self.lr)


def make_optimizer(
    name: str, params: Iterable[torch.nn.Parameter], lr: float
) -> torch.optim.Optimizer | PlainSGD:
    """The local optimiser a workload names; its state starts fresh each round (the server
    only averages weights, so no optimiser state crosses the wire). SGD on the CPU is
    PlainSGD (the same update; torch's own on a GPU, where it takes its foreach path)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {name!r}")
    params = list(params)
    if name == "sgd" and all(p.device.type == "cpu" for p in params):
        return PlainSGD(params, lr)
    return OPTIMIZERS[name](params, lr=lr)


DEVICES = ("auto", "cpu", "cuda")


def resolve_device(requested: str) -> str:
    """`auto` is CUDA when torch has it and a GPU is visible, else the CPU; asking for `cuda`
    where there is none is an error that says why, rather than a silent CPU run."""
    if requested not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {requested!r}")
    has_cuda = torch.cuda.is_available()
    if requested == "cuda" and not has_cuda:
        why = "has no CUDA" if torch.version.cuda is None else "sees no GPU"
        raise ValueError(f"device cuda: torch {torch.__version__} {why}; use auto or cpu")
    if requested == "auto":
        return "cuda" if has_cuda else "cpu"
    return requested


def site_seed(run_seed: int, round_no: int, site_index: int) -> int:
    """A seed per (run, round, site) so training is reproducible in any process order."""
    return int(np.random.SeedSequence([run_seed, round_no, site_index]).generate_state(1)[0])


def batch_indices(num_samples: int, steps: int, batch_size: int, seed: int) -> np.ndarray:
    """Indices of `steps` mini-batches: epochs of seeded permutations, concatenated."""
    rng = np.random.default_rng(seed)
    need = steps * batch_size
    reps = -(-need // max(num_samples, 1))
    order = np.concatenate([rng.permutation(num_samples) for _ in range(reps)])
    return order[:need].reshape(steps, batch_size)


def train_local(
    workload: Workload,
    model: torch.nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    steps: int,
    lr: float,
    batch_size: int,
    seed: int,
    channels_last: bool = False,
    optimizer: str = "sgd",
    fused_sgd: bool = False,
    on_step: Callable[[], None] | None = None,
) -> LocalResult:
    """Run `steps` optimiser steps (SGD unless `optimizer` names another, see
    `OPTIMIZERS`) from the model's current weights; return the delta (on the CPU).

    Training runs where the model's parameters are (CPU or CUDA); batches follow them.

    `channels_last` runs 4-d inputs and conv weights in NHWC, which oneDNN's CPU convolutions
    prefer; the math is unchanged (the delta comes back contiguous either way).

    `fused_sgd` (SGD only; other optimisers ignore it) lets each linear layer update its
    own weights inside its weight-gradient product (`powertrip.core.fused_sgd`): less memory
    traffic, the same math up to float rounding.

    `on_step`, when given, is called after each step, once its loss is on the host (so a
    GPU step has finished): `powertrip.core.steptime` times steps with it.
    """
    if len(y) == 0:
        raise ValueError("a site with no training samples cannot train")
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if channels_last:
        model.to(memory_format=torch.channels_last)
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    model.train()
    loss_fn = torch.nn.CrossEntropyLoss()
    batches = batch_indices(len(y), steps, batch_size, seed)
    total = 0.0
    fold = sgd_in_backward(model, lr) if fused_sgd and optimizer == "sgd" else nullcontext(set())
    with fold as folded:
        rest = [p for p in model.parameters() if id(p) not in folded]
        opt = make_optimizer(optimizer, rest, lr) if rest else None
        for ix in batches:
            inputs = workload.inputs(x[ix]).to(device)
            if channels_last and inputs.dim() == 4:
                inputs = inputs.contiguous(memory_format=torch.channels_last)
            targets = workload.targets(y[ix]).to(device)
            if opt is not None:
                opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            if opt is not None:
                opt.step()
            total += float(loss.detach())
            if on_step is not None:
                on_step()
    delta = {k: (v.detach() - start[k]).cpu().contiguous() for k, v in model.state_dict().items()}
    if channels_last:
        model.to(memory_format=torch.contiguous_format)
    model.load_state_dict(start)
    return LocalResult(delta=delta, num_samples=len(y), mean_loss=total / steps, steps=steps)


#: rows per forward pass when evaluating: on the FEMNIST CNN 2,000 held-out images took
#: 0.53 s in passes of 200 against 0.76 s in passes of 500 and 0.79 s with autograd on
#: (median of 7, 2 threads); smaller passes lose to per-call overhead (0.65 s at 50)
EVAL_FORWARD_ROWS = 200


def evaluate(
    workload: Workload, model: torch.nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 500
) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) over the given held-out samples.

    No autograd graph is kept (inference mode), and the forward pass goes
    EVAL_FORWARD_ROWS rows at a time, whose activations stay in cache; each row's logits do
    not depend on the rows beside it, and the loss is still summed per `batch_size` rows,
    so the figures are those of whole-batch passes: to the bit on AVX2 CPUs, to float
    rounding where the GEMM kernels block by row count (AVX-512/AMX; the loss's 8th
    digit), as tests/unit/test_evaluation.py checks."""
    model.eval()
    correct, loss_sum = 0, 0.0
    loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")
    device = next(model.parameters()).device  # the samples follow the model (CPU or CUDA)
    with torch.inference_mode():
        for start in range(0, len(y), batch_size):
            inputs = workload.inputs(x[start : start + batch_size]).to(device)
            targets = workload.targets(y[start : start + batch_size]).to(device)
            logits = torch.cat(
                [
                    model(inputs[row : row + EVAL_FORWARD_ROWS])
                    for row in range(0, len(inputs), EVAL_FORWARD_ROWS)
                ]
            )
            loss_sum += float(loss_fn(logits, targets))
            correct += int((logits.argmax(dim=1) == targets).sum())
    return correct / len(y), loss_sum / len(y)


def eval_subset(num_test: int, max_samples: int, seed: int) -> np.ndarray:
    """A fixed, seeded subset of held-out indices evaluated every round."""
    if max_samples <= 0 or max_samples >= num_test:
        return np.arange(num_test)
    return np.sort(np.random.default_rng(seed).choice(num_test, size=max_samples, replace=False))
