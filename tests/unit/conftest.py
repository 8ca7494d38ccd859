"""Fixtures shared by the unit tests of one feature across modules."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.unit.report_runs import make_run


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


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, list[dict]]:
    """deploy/k8s/'s base, each overlay and all components together, rendered offline
    (tests/unit/k8s_render.py; for test_k8s_*.py)."""
    from tests.unit.k8s_render import K8S, OVERLAYS, _render

    result = {"base": _render(K8S / "base")}
    for overlay in OVERLAYS:
        result[overlay] = _render(K8S / "overlays" / overlay)
    # the components must compose: one overlay with all of them (in the tree, so the
    # relative paths resolve; removed afterwards)
    combined = K8S / "overlays" / f".test-all-{os.getpid()}"
    combined.mkdir()
    try:
        (combined / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": ["../../base"],
                    "components": [f"../../components/{c}" for c in OVERLAYS],
                }
            )
        )
        result["all"] = _render(combined)
    finally:
        shutil.rmtree(combined)
    return result


# powertrip.app.report's comparison directory (tests/unit/test_report_*.py): three policies,
# one never reaching the target, and the launcher's logs (not a run)
@pytest.fixture()
def comparison_dir(tmp_path: Path) -> Path:
    root = tmp_path / "compare"
    make_run(root, "powertrip", [0.3, 0.55, 0.72, 0.81, 0.84], 600.0, ks=[4, 3, 3, 2, 2])
    make_run(root, "random", [0.2, 0.4, 0.6, 0.7, 0.78, 0.82], 900.0, ks=[3] * 6)
    make_run(root, "all", [0.25, 0.45, 0.6, 0.7], 2400.0, ks=[4] * 4)  # never reaches 0.8
    (root / "logs").mkdir()  # the launcher's logs: not a run
    return root
