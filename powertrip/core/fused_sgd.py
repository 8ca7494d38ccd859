"""Plain SGD folded into each linear layer's weight-gradient product (the loop trainer's
`fused_sgd`, on by default).

Why: at batch 20 the FEMNIST CNN's `fc1` (3136 x 2048, 25.7 MB of float32) is memory-bound,
and a plain step streams its weight-sized tensors six times: the forward reads the weights,
the input gradient reads them again, the weight gradient is written, and SGD reads the
gradient and the weights and writes the weights. Writing the update straight into the
weights from the gradient product, `W.addmm_(grad_out^T, x, alpha=-lr)`, drops the
gradient's write and read, a third of the layer's traffic (docs/benchmarks.md at 291b5ac2,
"Issue 19, round five", has the measurement).

The math is the same up to float rounding: `W - lr * (g^T x)` rounded once inside the GEMM
instead of a GEMM and then an axpy (tests/unit/test_fused_sgd.py bounds the difference
from the plain loop). Limits, each checked rather than assumed:

* plain SGD only (no momentum, weight decay or other optimiser): `train_local` folds only
  when the workload's optimiser is SGD, and trains every other one unchanged;
* exact `torch.nn.Linear` modules only (a subclass may have its own forward);
* a layer applied twice in one forward would have its weights updated between its two
  backward products: its second backward sees the weights' version moved and raises.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F  # noqa: N812 - torch's own spelling
from torch import nn


class _LinearSGD(torch.autograd.Function):
    """y = x W^T + b whose backward returns the input gradient and updates W and b by plain
    SGD in place (their gradients are never materialised)."""

    @staticmethod
    def forward(ctx, inputs, weight, bias, lr):
        ctx.save_for_backward(inputs)
        # the weights themselves, not saved tensors: backward changes them in place
        ctx.weight, ctx.bias, ctx.lr = weight, bias, lr
        ctx.version = weight._version
        return F.linear(inputs, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):
        (inputs,) = ctx.saved_tensors
        # detached views share the parameters' memory and version counter: the in-place
        # update below is legal on them and moves the version the check reads
        weight = ctx.weight.detach()
        bias = ctx.bias.detach() if ctx.bias is not None else None
        if weight._version != ctx.version:
            raise RuntimeError(
                "fused_sgd: a linear layer's weights changed between its forward and its "
                "backward (the layer applied twice in one forward pass?); set fused_sgd: false"
            )
        # the input gradient from the weights the forward used, before they move
        grad_in = grad_out @ weight if ctx.needs_input_grad[0] else None
        out_2d = grad_out.reshape(-1, grad_out.shape[-1])
        weight.addmm_(out_2d.t(), inputs.reshape(-1, inputs.shape[-1]), alpha=-ctx.lr)
        if bias is not None:
            bias.add_(out_2d.sum(0), alpha=-ctx.lr)
        return grad_in, None, None, None


def _fused_forward(layer: nn.Linear, lr: float):
    def forward(inputs: torch.Tensor) -> torch.Tensor:
        # the parameters themselves, so the output needs a backward even when nothing
        # before the layer does; their gradient is never returned
        return _LinearSGD.apply(inputs, layer.weight, layer.bias, lr)

    return forward


@contextmanager
def sgd_in_backward(model: nn.Module, lr: float) -> Iterator[set[int]]:
    """Within the block, every `nn.Linear` of `model` updates its own weights by plain SGD
    with `lr` during backward. Yields the ids of the parameters so updated: the block's
    optimiser must leave them out (they never get a `.grad`)."""
    layers = [m for m in model.modules() if type(m) is nn.Linear and m.weight.requires_grad]
    folded = {id(p) for layer in layers for p in layer.parameters()}
    for layer in layers:
        layer.forward = _fused_forward(layer, lr)  # the instance's, over the class's
    try:
        yield folded
    finally:
        for layer in layers:
            del layer.forward
