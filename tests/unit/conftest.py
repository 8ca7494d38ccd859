"""Fixtures shared by the unit tests of one feature across modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def base_file(tmp_path_factory):
    """shakespeare-lm's base as `powertrip data pretrain` writes it (untrained here: for the
    mechanics of LoRA and QLoRA, tests/unit/test_peft.py and test_qlora_4bit.py)."""
    pytest.importorskip("transformers", reason="needs the llm extra: pip install -e '.[llm]'")
    import torch
    from safetensors.torch import save_file

    from powertrip.core.workloads.shakespeare_lm import build_decoder

    torch.manual_seed(3)
    state = {k: v.contiguous() for k, v in build_decoder().state_dict().items()}
    state.pop("lm.lm_head.weight")
    path = tmp_path_factory.mktemp("base") / "base.safetensors"
    save_file(state, str(path))
    return path
