"""`fused_sgd`: linear layers that apply plain SGD inside their backward give the plain
loop's update up to float rounding, only where plain SGD is the optimiser, and refuse a
layer applied twice in one forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from powertrip.core.batched import train_sites
from powertrip.core.fused_sgd import sgd_in_backward
from powertrip.core.training import train_local
from powertrip.core.workloads import get_workload


def _train(workload, model, jobs, **kwargs):
    return train_sites(workload, model, jobs, steps=10, batch_size=20, **kwargs)


def _linear_grads(model: nn.Module) -> list[torch.Tensor | None]:
    return [m.weight.grad for m in model.modules() if type(m) is nn.Linear]


@pytest.mark.parametrize("name, lr", [("femnist", 0.1), ("synthetic", 0.05)])
def test_fused_sgd_matches_the_plain_update_within_float_rounding(name, lr, site_jobs):
    workload = get_workload(name)
    torch.manual_seed(0)
    model = workload.build_model()
    jobs = site_jobs(workload, 2, 100 if name == "femnist" else 20)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    plain = _train(workload, model, jobs, lr=lr, channels_last=True, fused_sgd=False)
    assert all(g is not None for g in _linear_grads(model))  # plain SGD made gradients
    for p in model.parameters():
        p.grad = None
    fused = _train(workload, model, jobs, lr=lr, channels_last=True, fused_sgd=True)
    # the linear layers updated themselves: no gradient was ever materialised for them
    assert all(g is None for g in _linear_grads(model))
    for got, want in zip(fused, plain, strict=True):
        assert got.mean_loss == pytest.approx(want.mean_loss, rel=1e-5)
        for key, value in want.delta.items():
            a, b = got.delta[key].numpy(), value.numpy()
            assert np.abs(b).max() > 0, key  # a real update, so closeness says something
            # within float rounding, carried through the steps: every step after the first
            # starts from weights that differ in their last bits, and the difference grows
            # with the steps. With the pinned kernels' convolutions (ATen's, not oneDNN's) one
            # conv bias entry of 1.2e-3 differed by 1.7e-6, 1.2e-4 of its tensor's norm; an
            # error in the fused update itself would be of the update's own size
            assert np.linalg.norm(a - b) <= 1e-3 * np.linalg.norm(b), key
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5, err_msg=key)
    # the model is left at the global weights for the next site, and its own forward back
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert all("forward" not in vars(m) for m in model.modules())


def test_fused_sgd_leaves_other_optimisers_untouched(site_jobs):
    workload = get_workload("synthetic")
    torch.manual_seed(1)
    model = workload.build_model()
    job = site_jobs(workload, 1, 20, seed=1)[0]

    def adamw(fused: bool):
        return train_local(
            workload, model, job.x, job.y, steps=5, lr=0.01, batch_size=20, seed=job.seed,
            optimizer="adamw", fused_sgd=fused,
        )  # fmt: skip

    plain, fused = adamw(False), adamw(True)
    for key, value in plain.delta.items():
        assert torch.equal(fused.delta[key], value), key  # bit for bit: nothing folded


def test_a_linear_layer_applied_twice_is_refused():
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(torch.relu(self.fc(x)))

    model = Twice()
    with (
        sgd_in_backward(model, 0.1),
        pytest.raises(RuntimeError, match="applied twice in one forward"),
    ):
        model(torch.randn(3, 4)).sum().backward()
    assert "forward" not in vars(model.fc)
