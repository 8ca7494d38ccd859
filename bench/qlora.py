"""qlora_base_memory_ratio: what QLoRA's 4-bit base saves on a CUDA GPU, against LoRA on a
float32 base, measured in one process on one GPU (powertrip/core/peft.py builds both).

shakespeare-lm's own model (87 k parameters) is too small for memory to mean anything, so
this builds a Llama of the same family at a size where the frozen base dominates (OUR
CHOICE: hidden 1024, MLP 2816, 8 layers, about 101 M parameters in linear layers; a
character vocabulary of 80 as the workload's), and reports for each form:

* `base_bytes`: the GPU memory the model holds once built (torch.cuda.memory_allocated);
* `peak_train_bytes`: the peak during `STEPS` training steps (AdamW on the adapters);
* `step_s`: the median step time after `WARMUP` steps.

The ratios (4-bit over float32) are the benchmark's figures. Only where torch sees a CUDA GPU
and bitsandbytes is installed (extra `[qlora]`); otherwise it says why it did not measure.

    python bench/run.py --only qlora      # or: python -m bench.qlora [--json OUT.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path

SHAPE = {
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
}
VOCAB, SEQ, BATCH = 80, 80, 16
WARMUP, STEPS = 3, 20
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        max_position_embeddings=SEQ,
        tie_word_embeddings=True,
        attn_implementation="eager",
        **SHAPE,
    )
    return LlamaForCausalLM(config)


def train_figures(method: str) -> dict:
    """Build the model with `method` (lora: float32 base; qlora: the 4-bit base) on CUDA and
    train its adapters for a few steps."""
    import torch

    from powertrip.core.peft import with_adapters
    from powertrip.core.peftspec import PeftSpec

    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    torch.manual_seed(0)
    spec = PeftSpec.parse(f"{method}:r=16,alpha=32,targets={'+'.join(TARGETS)}")
    model = with_adapters(_model(), spec, "cuda").to("cuda")
    torch.cuda.synchronize()
    base_bytes = torch.cuda.memory_allocated() - before
    adapters = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(1)
    times = []
    for step in range(WARMUP + STEPS):
        x = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda", generator=gen)
        torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad()
        logits = model(input_ids=x, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB),
                                                 x[:, 1:].reshape(-1))  # fmt: skip
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        if step >= WARMUP:
            times.append(time.perf_counter() - start)
    figures = {
        "method": method,
        "base_bytes": base_bytes,
        "peak_train_bytes": torch.cuda.max_memory_allocated() - before,
        "adapter_parameters": adapters,
        "step_s": statistics.median(times),
        "final_loss": float(loss.detach()),
    }
    del model, optimizer
    return figures


def qlora_figures() -> dict:
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return {"qlora": f"not measured: torch {torch.__version__} sees no CUDA GPU"}
    if importlib.util.find_spec("bitsandbytes") is None:
        return {"qlora": "not measured: no bitsandbytes (pip install 'powertrip[qlora]')"}
    lora, qlora = train_figures("lora"), train_figures("qlora")
    return {
        "qlora_device": torch.cuda.get_device_name(),
        "qlora_base_memory_ratio": qlora["base_bytes"] / lora["base_bytes"],
        "qlora_peak_memory_ratio": qlora["peak_train_bytes"] / lora["peak_train_bytes"],
        "qlora_step_time_ratio": qlora["step_s"] / lora["step_s"],
        "qlora_runs": {"shape": SHAPE, "lora": lora, "qlora": qlora},
    }


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    """bench/run.py's entry (--only qlora); a CUDA GPU only."""
    print("qlora: 4-bit base vs float32 base on CUDA ...", flush=True)
    return qlora_figures()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    figures = qlora_figures()
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
