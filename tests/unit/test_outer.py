"""The outer step (powertrip/core/outer.py): FedAvg is w + delta to the bit, Nesterov is
torch.optim.SGD(nesterov=True) on the pseudo-gradient -delta, FedAvgM is
torch.optim.SGD(momentum) on it (heavy ball) and FedAvg to the bit at lr 1 and momentum 0,
and bad settings are named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from powertrip.core.config import ConfigError, RunConfig
from powertrip.core.fedavg import apply_delta
from powertrip.core.outer import OuterStep, outer_of, outer_update


def _arrays(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w": rng.normal(size=(6, 4)).astype(np.float32),
        "b": rng.normal(size=4).astype(np.float32),
        "steps": np.array([3], dtype=np.int64),  # a counter: added, no momentum
    }


def _five_rounds_beside_torch(step: OuterStep, *, nesterov: bool):
    """Five outer steps of `step` on float weights, and torch's SGD with the same lr and
    momentum stepping on the pseudo-gradient g = -delta beside them: (weights, buffer,
    torch's parameters by key, torch's optimizer)."""
    weights = {k: v for k, v in _arrays(0).items() if k != "steps"}
    params = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in weights.items()}
    sgd = torch.optim.SGD(
        list(params.values()), lr=step.lr, momentum=step.momentum, nesterov=nesterov
    )
    buffer = None
    for r in range(5):
        delta = {k: v for k, v in _arrays(10 + r).items() if k in weights}
        weights, buffer = outer_update(weights, delta, buffer, step)
        sgd.zero_grad()
        for key, param in params.items():
            param.grad = torch.from_numpy(-delta[key])
        sgd.step()
    return weights, buffer, params, sgd


def test_fedavg_is_apply_delta_bit_for_bit_and_keeps_no_buffer():
    weights, delta = _arrays(0), _arrays(1)
    new, buffer = outer_update(weights, delta, None, OuterStep("fedavg"))
    assert buffer is None
    for key, value in apply_delta(weights, delta).items():
        assert np.array_equal(new[key], value)


@pytest.mark.parametrize(("lr", "momentum"), [(0.7, 0.9), (1.0, 0.5), (0.3, 0.99)])
def test_nesterov_matches_torch_sgd_on_the_pseudo_gradient(lr, momentum):
    """Five rounds against torch's own Nesterov SGD stepping on g = -delta."""
    step = OuterStep("nesterov", lr, momentum)
    weights, buffer, params, sgd = _five_rounds_beside_torch(step, nesterov=True)
    for key, param in params.items():
        np.testing.assert_allclose(weights[key], param.detach().numpy(), rtol=1e-5, atol=1e-6)
        assert weights[key].dtype == np.float32
    assert buffer is not None and set(buffer) == set(weights)


def test_nesterov_adds_counters_as_fedavg_does_and_differs_from_fedavg_on_floats():
    weights, delta = _arrays(0), _arrays(1)
    new, buffer = outer_update(weights, delta, None, OuterStep("nesterov"))
    assert np.array_equal(new["steps"], weights["steps"] + delta["steps"])
    assert "steps" not in buffer
    # the first step with lr 0.7 and momentum 0.9 moves 0.7 x 1.9 = 1.33 deltas
    np.testing.assert_allclose(new["w"] - weights["w"], 1.33 * delta["w"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("lr", "momentum"), [(1.0, 0.9), (0.7, 0.5), (0.3, 0.99)])
def test_fedavgm_matches_torch_sgd_heavy_ball_on_the_pseudo_gradient(lr, momentum):
    """Five rounds against torch's own SGD with (heavy-ball) momentum stepping on g = -delta:
    b_t = mu b_{t-1} + delta_t, w_{t+1} = w_t + lr b_t (Hsu et al., 2019)."""
    step = OuterStep("fedavgm", lr, momentum)
    weights, buffer, params, sgd = _five_rounds_beside_torch(step, nesterov=False)
    for key, param in params.items():
        np.testing.assert_allclose(weights[key], param.detach().numpy(), rtol=1e-5, atol=1e-6)
        assert weights[key].dtype == np.float32
        # torch's momentum buffer holds the pseudo-gradient's: -b
        torch_buffer = sgd.state[param]["momentum_buffer"].numpy()
        np.testing.assert_allclose(buffer[key], -torch_buffer, rtol=1e-5, atol=1e-6)
    assert buffer is not None and set(buffer) == set(weights)


def test_fedavgm_at_lr_1_and_momentum_0_is_fedavg_bit_for_bit():
    """Five rounds, the buffer carried: every array (counters too) equals FedAvg's bytes."""
    fedavgm, fedavg = OuterStep("fedavgm", 1.0, 0.0), OuterStep("fedavg")
    a = b = _arrays(0)
    buffer = None
    for r in range(5):
        delta = _arrays(10 + r)
        a, buffer = outer_update(a, delta, buffer, fedavgm)
        b, none = outer_update(b, delta, None, fedavg)
        assert none is None and buffer is not None
        for key in b:
            assert a[key].dtype == b[key].dtype
            assert a[key].tobytes() == b[key].tobytes(), key


def test_fedavgm_adds_counters_as_fedavg_does_and_moves_by_lr_times_the_buffer():
    weights, delta = _arrays(0), _arrays(1)
    step = OuterStep("fedavgm", 0.7, 0.9)
    new, buffer = outer_update(weights, delta, None, step)
    assert np.array_equal(new["steps"], weights["steps"] + delta["steps"])
    assert "steps" not in buffer
    # the first step: b_1 = delta, so the model moves 0.7 deltas (no look-ahead: not 1.33)
    np.testing.assert_allclose(new["w"] - weights["w"], 0.7 * delta["w"], rtol=1e-5, atol=1e-6)
    # the second: b_2 = 0.9 delta_1 + delta_2
    delta2 = _arrays(2)
    newer, buffer2 = outer_update(new, delta2, buffer, step)
    expected = 0.9 * delta["w"] + delta2["w"]
    np.testing.assert_allclose(buffer2["w"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(newer["w"] - new["w"], 0.7 * expected, rtol=1e-5, atol=1e-5)


def test_nesterov_and_fedavgm_keep_a_buffer_and_fedavg_none():
    assert OuterStep("nesterov").has_state and OuterStep("fedavgm").has_state
    assert not OuterStep("fedavg").has_state
    first = outer_update(_arrays(0), _arrays(1), None, OuterStep("nesterov"))
    heavy = outer_update(_arrays(0), _arrays(1), None, OuterStep("fedavgm"))
    assert all(np.array_equal(first[1][k], heavy[1][k]) for k in first[1])  # b_1 = delta
    assert not np.array_equal(first[0]["w"], heavy[0]["w"])  # the steps differ


@pytest.mark.parametrize("optimizer", ["nesterov", "fedavgm"])
def test_the_outer_step_repeats_byte_for_byte(optimizer):
    a = outer_update(_arrays(0), _arrays(1), _arrays(2), OuterStep(optimizer))
    b = outer_update(_arrays(0), _arrays(1), _arrays(2), OuterStep(optimizer))
    for key in a[0]:
        assert a[0][key].tobytes() == b[0][key].tobytes()
    for key in a[1]:
        assert a[1][key].tobytes() == b[1][key].tobytes()


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"outer_optimizer": "adam"}, "outer_optimizer must be one of fedavg, nesterov, fedavgm"),
        ({"outer_lr": 0}, "outer_lr: must be > 0"),
        ({"outer_momentum": 1}, "outer_momentum: must be in [0, 1)"),
        ({"outer_momentum": -0.1}, "outer_momentum: must be in [0, 1)"),
    ],
)
def test_a_bad_outer_setting_is_named_with_what_is_allowed(values, words):
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace(")", r"\)")):
        RunConfig().with_values(values, "--set").validate()


def test_a_run_records_its_outer_step_and_a_stored_run_without_one_was_fedavg():
    config = RunConfig().with_values({"outer_lr": 0.5}, "--set")
    assert outer_of(config) == OuterStep("nesterov", 0.5, 0.9)  # nesterov: the default
    stored = {k: v for k, v in RunConfig().to_dict().items() if not k.startswith("outer_")}
    from powertrip.core.config import experiment_differences

    fedavg = RunConfig(outer_optimizer="fedavg").to_dict()
    assert experiment_differences(stored, fedavg) == []
    assert sorted(experiment_differences(stored, config.to_dict())) == [
        "outer_lr",
        "outer_optimizer",
    ]


def test_a_stored_run_from_before_the_defaults_moved_reruns_as_it_ran(tmp_path):
    """A run's config.yaml (its provenance block marks it as one) without outer_optimizer
    or delta_encoding ran before they existed: FedAvg and fp32, whatever the defaults are
    now. A user's own YAML without them gets today's defaults."""
    from powertrip.core import provenance

    stored = tmp_path / "config.yaml"
    RunConfig().write_yaml(stored, made_by=provenance.collect())
    lines = stored.read_text().splitlines()
    kept = [line for line in lines if not line.startswith(("outer_", "delta_encoding"))]
    assert len(lines) - len(kept) == 4  # the three outer settings and delta_encoding
    stored.write_text("\n".join(kept))
    then = RunConfig.from_yaml(stored)
    assert (then.outer_optimizer, then.delta_encoding) == ("fedavg", "fp32")
    mine = tmp_path / "mine.yaml"
    mine.write_text("num_sites: 10\n")
    now = RunConfig.from_yaml(mine)
    assert (now.outer_optimizer, now.delta_encoding) == ("nesterov", "int8")
