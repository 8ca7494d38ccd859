"""The Shakespeare (LEAF LSTM) and speech (KWT-1) workloads' models (parameter counts and
output shapes), their registry defaults, and an unknown optimizer named."""

from __future__ import annotations

import pytest
import torch

from powertrip.core.training import make_optimizer
from powertrip.core.workloads import audio, get_workload, shakespeare, speech
from tests.unit.workloads_helpers import _one_torch_thread  # noqa: F401 (autouse fixture)


def _n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ---- models -------------------------------------------------------------------------------
def test_kwt1_parameter_count_and_output_shape():
    torch.manual_seed(0)
    model = speech.build_kwt(30)
    head = 64 * 30 + 30
    # 606,528 without the head is the released KWT-1 summary; "607K" in the paper
    assert _n_params(model) - head == 606_528
    assert abs(_n_params(model) - 607_000) / 607_000 < 0.02
    out = model(torch.randn(3, audio.NUM_MFCC, audio.NUM_FRAMES))
    assert out.shape == (3, 30)


def test_leaf_lstm_parameter_count_and_output_shape():
    torch.manual_seed(0)
    model = shakespeare.build_lstm()
    # LEAF stacked_lstm: embedding 80x8, 2 LSTM layers of 256, dense 256->80. torch keeps two
    # bias vectors per LSTM layer (TF one): 817,872 + 2 x 1,024.
    assert _n_params(model) == 819_920
    out = model(torch.randint(0, 80, (5, 80)))
    assert out.shape == (5, 80)


def test_registry_defaults():
    shk, sp = get_workload("shakespeare"), get_workload("speech")
    assert (shk.defaults.lr, shk.defaults.batch_size) == (0.8, 20)
    assert (sp.defaults.lr, sp.defaults.batch_size) == (0.001, 16)
    for w in (shk, sp):
        assert w.defaults.update_size_bytes == 1.5e9 and w.defaults.tau_s == 60.0


def test_unknown_optimizer_is_named():
    with pytest.raises(ValueError, match="adamw.*sgd.*'adam'"):
        make_optimizer("adam", [torch.nn.Parameter(torch.zeros(1))], 0.1)


def test_plain_sgd_makes_torch_sgd_s_bytes_without_importing_dynamo():
    """The site's SGD on the CPU (PlainSGD) must leave the same weights as torch.optim.SGD,
    step by step, and build without importing torch._dynamo (the 1.4 s it saves); a GPU's
    parameters keep torch's class."""
    import subprocess
    import sys

    from powertrip.core.training import PlainSGD

    def mlp() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(30, 20), torch.nn.ReLU(), torch.nn.Linear(20, 5))

    models = [mlp(), mlp()]
    ours = make_optimizer("sgd", models[0].parameters(), 0.37)
    theirs = torch.optim.SGD(models[1].parameters(), lr=0.37)
    assert isinstance(ours, PlainSGD)
    x, y = torch.randn(8, 30), torch.randint(0, 5, (8,))
    for _ in range(5):
        for model, opt in ((models[0], ours), (models[1], theirs)):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
            assert a.detach().numpy().tobytes() == b.detach().numpy().tobytes()
    probe = (
        "import sys, torch; from powertrip.core.training import make_optimizer; "
        "make_optimizer('sgd', [torch.nn.Parameter(torch.zeros(2))], 0.1); "
        "print('torch._dynamo' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
