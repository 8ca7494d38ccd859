"""QLoRA's 4-bit base (powertrip/core/peft.py): on a CUDA device with bitsandbytes the frozen
linear layers are bitsandbytes NF4 `Linear4bit`s, elsewhere the base is NF4-rounded float;
the two forms must hold the same base, so a run's sites (4-bit, on GPUs) and its aggregator
(rounded, evaluating on its CPU) score the same model.

The 4-bit layers are built and checked on the CPU here too (bitsandbytes quantizes on a CPU;
training-mode forward dequantizes and computes in float32); the CUDA tests run only where a
GPU is (they were run on an H200: the closing note of issue #35 has the output)."""

from __future__ import annotations

import numpy as np
import pytest

from powertrip.core.peftspec import PeftSpec

pytest.importorskip("transformers", reason="needs the llm extra: pip install -e '.[llm]'")
pytest.importorskip("peft", reason="needs the llm extra: pip install -e '.[llm]'")

import torch  # noqa: E402

from powertrip.core import peft as peft_module  # noqa: E402
from powertrip.core.peft import nf4_round, qlora_form, quantize_base  # noqa: E402
from powertrip.core.training import train_local  # noqa: E402
from powertrip.core.workloads.shakespeare_lm import (  # noqa: E402
    MODEL_SHAPE,
    ShakespeareLMWorkload,
)
from powertrip.core.workloads.shakespeare_text import NUM_LETTERS  # noqa: E402

#: q, k, v, o, gate, up, down in each layer; the output layer is tied to the embedding
LINEAR_4BIT = MODEL_SHAPE["num_hidden_layers"] * 7
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_the_4bit_form_is_for_cuda_with_bitsandbytes_only():
    assert qlora_form("cuda", True) == "4bit"
    assert qlora_form("cuda:1", True) == "4bit"
    assert qlora_form("cuda", False) == "rounded"
    assert qlora_form("cpu", True) == "rounded"
    with pytest.raises(ValueError, match="4bit, rounded"):
        quantize_base(torch.nn.Linear(2, 2), "int8")


def test_without_bitsandbytes_cuda_falls_back_to_rounding_and_says_so(
    base_file, monkeypatch, caplog
):
    monkeypatch.setattr(peft_module, "have_bitsandbytes", lambda: False)
    workload = ShakespeareLMWorkload(PeftSpec.parse("qlora:r=2"), base_path=base_file)
    with caplog.at_level("WARNING", logger="powertrip.core.peft"):
        model = workload.build_model("cuda")  # built on the CPU; the caller would move it
    assert not _four_bit_layers(model)
    assert "powertrip[qlora]" in caplog.text and "without bitsandbytes" in caplog.text


def _four_bit_layers(model) -> dict:
    bnb = pytest.importorskip("bitsandbytes")
    base = getattr(model, "base", model)
    return {n: m for n, m in base.named_modules() if isinstance(m, bnb.nn.Linear4bit)}


def _dequantized(layer) -> torch.Tensor:
    import bitsandbytes as bnb

    weight = layer.weight
    return bnb.functional.dequantize_4bit(weight.data, weight.quant_state)


def _build(base_file, form: str, device: str, monkeypatch):
    """shakespeare-lm with qlora r=2 in `form`, on `device`, from the same seed."""
    monkeypatch.setattr(peft_module, "qlora_form", lambda *_: form)
    torch.manual_seed(0)
    workload = ShakespeareLMWorkload(PeftSpec.parse("qlora:r=2"), base_path=base_file)
    return workload, workload.build_model(device).to(device)


def _windows(n: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, NUM_LETTERS, (n, 80)).astype(np.uint8), rng.integers(0, 80, n)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_the_4bit_base_dequantizes_to_the_rounded_base_bit_for_bit(base_file, device, monkeypatch):
    _, rounded = _build(base_file, "rounded", device, monkeypatch)
    _, four_bit = _build(base_file, "4bit", device, monkeypatch)
    layers = _four_bit_layers(four_bit)
    assert len(layers) == LINEAR_4BIT, sorted(layers)
    plain = dict(rounded.base.named_modules())
    for name, layer in layers.items():
        weight = layer.weight
        assert weight.dtype == torch.uint8 and weight.device.type == device
        # two 4-bit codes a byte
        assert weight.numel() * 2 == plain[name].weight.numel(), name
        assert torch.equal(_dequantized(layer), plain[name].weight.detach()), name
    # the tied output layer stays float, rounded as in the rounded form
    head_4bit = four_bit.base.lm.lm_head.weight
    assert head_4bit.dtype == torch.float32
    assert torch.equal(head_4bit, rounded.base.lm.lm_head.weight)
    assert torch.equal(head_4bit, nf4_round(head_4bit))
    # the state that crosses the wire is the same adapters, with the same names
    assert rounded.state_dict().keys() == four_bit.state_dict().keys()
    for key, value in rounded.state_dict().items():
        assert torch.equal(value, four_bit.state_dict()[key]), key


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_training_on_the_4bit_base_leaves_it_bit_identical_and_matches_the_rounded_form(
    base_file, device, monkeypatch
):
    x, y = _windows()
    deltas = {}
    for form in ("rounded", "4bit"):
        workload, model = _build(base_file, form, device, monkeypatch)
        frozen = {k: v.clone() for k, v in model.base.state_dict().items() if "lora_" not in k}
        result = train_local(
            workload, model, x, y, steps=4, lr=0.01, batch_size=8, seed=1, optimizer="adamw"
        )
        assert set(result.delta) == set(model.state_dict())
        assert any(float(d.abs().max()) > 0 for d in result.delta.values())
        after = model.base.state_dict()
        for name, value in frozen.items():  # the packed codes and the absmax included
            assert torch.equal(after[name], value), name
        deltas[form] = result.delta
    for key, value in deltas["rounded"].items():
        # the same float32 numbers, through different kernels (bitsandbytes dequantizes
        # and multiplies; the rounded form's linear layer multiplies at once)
        torch.testing.assert_close(deltas["4bit"][key], value, rtol=1e-4, atol=1e-5)


@cuda
def test_the_4bit_base_on_cuda_evaluates_as_the_rounded_form(base_file, monkeypatch):
    x, _ = _windows(64)
    inputs = torch.from_numpy(x.astype(np.int64)).cuda()
    logits = {}
    for form in ("rounded", "4bit"):
        _, model = _build(base_file, form, "cuda", monkeypatch)
        model.eval()
        with torch.no_grad():
            logits[form] = model(inputs)
    torch.testing.assert_close(logits["4bit"], logits["rounded"], rtol=1e-4, atol=1e-4)


@cuda
def test_the_site_worker_builds_the_4bit_form_on_cuda(base_file):
    """No monkeypatching: the workload, asked for CUDA with bitsandbytes installed."""
    pytest.importorskip("bitsandbytes")
    workload = ShakespeareLMWorkload(PeftSpec.parse("qlora:r=2"), base_path=base_file)
    model = workload.build_model("cuda").to("cuda")
    assert len(_four_bit_layers(model)) == LINEAR_4BIT
    assert all(p.is_cuda for p in model.parameters())
