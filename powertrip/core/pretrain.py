"""`powertrip data pretrain shakespeare-lm`: the pretrained base that every site of the
`shakespeare-lm` workload fine-tunes (data/shakespeare-lm/README.md says what it reached).
Apart from the workload module because it trains (powertrip.core.training), which the
workloads package must not import."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from powertrip.core.workloads.shakespeare_lm import (
    MODEL_SHAPE,
    RESERVE_EVERY,
    ShakespeareLMWorkload,
    build_decoder,
    perplexity,
)
from powertrip.core.workloads.shakespeare_samples import SEQ_LEN
from powertrip.core.workloads.shakespeare_text import NUM_LETTERS


def pretrain_base(
    out: Path,
    *,
    steps: int = 3000,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    data_dir: str | Path | None = None,
    progress=None,
) -> dict:
    """Pretrain the base on the reserved plays (AdamW, seeded: the same file every time on
    one machine), write it to `out` (safetensors) beside `out`.json (how it was made and
    what it reached on the reserved plays' held-out windows); returns that record."""
    import hashlib
    import json

    import torch
    from safetensors.torch import save_file

    from powertrip.core.training import evaluate

    workload = ShakespeareLMWorkload()
    data = workload.pretraining_data(data_dir, seed)
    torch.manual_seed(seed)
    model = build_decoder()
    rng = np.random.default_rng(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    for step in range(steps):
        ix = rng.integers(0, len(data.train), batch_size)
        x = workload.inputs(data.train.x[ix])
        y = workload.targets(data.train.y[ix])
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if progress is not None:
            progress(step + 1, float(loss))
    keep = np.random.default_rng(seed).permutation(len(data.test))[:5000]
    accuracy, cross_entropy = evaluate(workload, model, data.test.x[keep], data.test.y[keep])
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    # tied embeddings share one tensor: save it once (safetensors refuses shared storage)
    state.pop("lm.lm_head.weight", None)
    save_file(state, str(out))
    out.chmod(0o644)  # read by the services (uid 65532 in the images), not only its maker
    record = {
        "file": out.name,
        "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
        "bytes": out.stat().st_size,
        "parameters": int(sum(v.numel() for v in state.values())),
        "model": {"type": "llama", **MODEL_SHAPE, "vocab_size": NUM_LETTERS, "positions": SEQ_LEN},
        "data": f"LEAF Shakespeare windows of the reserved plays (every {RESERVE_EVERY}th): "
        f"{len(data.train)} train, {len(data.test)} held-out, {len(data.user_names)} roles",
        "training": {
            "steps": steps,
            "batch_size": batch_size,
            "optimizer": "AdamW",
            "lr": lr,
            "weight_decay": 0.01,
            "seed": seed,
        },  # fmt: skip
        "held_out": {
            "samples": len(keep),
            "accuracy": round(accuracy, 4),
            "perplexity": round(perplexity(cross_entropy), 3),
        },  # fmt: skip
        "versions": {"torch": torch.__version__, "transformers": _version("transformers")},
    }
    out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)
