"""A run's `peft` setting (powertrip/core/peft.py does the fine-tuning): the method and
LoRA's options, parsed without torch, so the run configuration can check it anywhere (the
policy and profiler images have no torch)."""

from __future__ import annotations

from dataclasses import dataclass

METHODS = ("none", "lora", "qlora")
EXTRA_HINT = "pip install 'powertrip[llm]' (transformers and peft)"


class PeftSpecError(ValueError):
    """A bad `peft` spec; the message names the part."""


@dataclass(frozen=True)
class PeftSpec:
    """What `peft` says: the method and LoRA's rank, alpha, dropout and target modules."""

    method: str = "none"
    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = ("q_proj", "v_proj")

    @property
    def enabled(self) -> bool:
        return self.method != "none"

    @classmethod
    def parse(cls, text: str | None) -> PeftSpec:
        """`lora:r=8,alpha=16,...`; a bad spec is a PeftSpecError naming the part."""
        text = (text or "none").strip()
        method, _, options = text.partition(":")
        if method not in METHODS:
            raise PeftSpecError(f"peft: method {method!r} is not one of {', '.join(METHODS)}")
        values: dict = {}
        for item in filter(None, (o.strip() for o in options.split(","))):
            key, sep, value = item.partition("=")
            if not sep:
                raise PeftSpecError(f"peft: {item!r} is not NAME=VALUE")
            if key not in ("r", "alpha", "dropout", "targets"):
                raise PeftSpecError(
                    f"peft: unknown option {key!r}; options: r, alpha, dropout, targets"
                )
            if key == "targets":
                values["targets"] = tuple(t for t in value.split("+") if t)
                continue
            try:
                values[key] = int(value) if key == "r" else float(value)
            except ValueError:
                raise PeftSpecError(f"peft: {key}={value!r} is not a number") from None
        if method == "none" and values:
            raise PeftSpecError("peft: options need a method (lora or qlora)")
        spec = cls(method=method, **values)
        if spec.r < 1:
            raise PeftSpecError(f"peft: r must be >= 1, got {spec.r}")
        if not spec.alpha > 0:
            raise PeftSpecError(f"peft: alpha must be > 0, got {spec.alpha}")
        if not 0.0 <= spec.dropout < 1.0:
            raise PeftSpecError(f"peft: dropout must be in [0, 1), got {spec.dropout}")
        if not spec.targets:
            raise PeftSpecError("peft: targets must name at least one module")
        return spec

    def __str__(self) -> str:
        if not self.enabled:
            return "none"
        targets = "+".join(self.targets)
        return (
            f"{self.method}:r={self.r},alpha={self.alpha:g},dropout={self.dropout:g},"
            f"targets={targets}"
        )

    @property
    def label(self) -> str:
        """How reports name it (the CPU form of QLoRA says so)."""
        return {"qlora": "qlora (NF4 rounding on CPU)"}.get(self.method, self.method)


#: Llama-2-7B (Touvron et al. 2023): 32 layers; hidden 4096, MLP 11008; 6.74 B parameters;
#: updates in fp16. Each linear module's (d_in, d_out).
LLAMA_2_7B_LAYERS = 32
LLAMA_2_7B_MODULES = {
    "q_proj": (4096, 4096),
    "k_proj": (4096, 4096),
    "v_proj": (4096, 4096),
    "o_proj": (4096, 4096),
    "gate_proj": (4096, 11008),
    "up_proj": (4096, 11008),
    "down_proj": (11008, 4096),
}
LLAMA_2_7B_PARAMETERS = 6.74e9
FP16_BYTES = 2


def emulated_update_bytes(spec: PeftSpec) -> float:
    """The update a site would send if the model were Llama-2-7B (what M emulates, paper
    §3.1: the score weights follow the update size). Full fine-tuning sends every parameter:
    6.74e9 x 2 bytes = 13.5 GB. LoRA sends A (r x d_in) and B (d_out x r) for each target
    module of each layer: r (d_in + d_out) x 32 layers x 2 bytes; r = 16 on q_proj and v_proj
    is 16 x 8192 x 2 x 32 x 2 = 16.8 MB, on all four attention projections 33.6 MB. QLoRA
    sends the same adapters (its base is quantized, not its update)."""
    if not spec.enabled:
        return LLAMA_2_7B_PARAMETERS * FP16_BYTES
    unknown = [t for t in spec.targets if t not in LLAMA_2_7B_MODULES]
    if unknown:
        raise PeftSpecError(
            f"peft: targets {', '.join(unknown)} are not Llama modules "
            f"({', '.join(LLAMA_2_7B_MODULES)})"
        )
    per_layer = sum(spec.r * sum(LLAMA_2_7B_MODULES[t]) for t in spec.targets)
    return float(per_layer * LLAMA_2_7B_LAYERS * FP16_BYTES)
