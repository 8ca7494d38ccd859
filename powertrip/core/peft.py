"""Parameter-efficient fine-tuning for the sites: LoRA and a CPU form of QLoRA (paper §4:
"PowerTrip supports QLoRA or LoRA optimizations for training large language models, reducing
network overhead by reducing update parameter sizes").

A run's `peft` setting is a short spec, `none`, `lora` or `qlora`, with options after a colon:

    lora:r=8,alpha=16,dropout=0.05,targets=q_proj+v_proj

LoRA adapters are injected with the `peft` library (extra `[llm]`) into the workload's
pretrained model, whose own weights are frozen. `AdapterOnly` then wraps it in a module
whose `state_dict()` and `parameters()` are the adapter tensors alone, while the frozen base
lives outside them. So the wire, the aggregator, FedAvg and the checkpoints carry adapters
only, with no other change: a site's delta is the change of its A and B matrices, and the
aggregator's FedAvg averages A and B separately. That is FedIT's rule (Zhang et al. 2024):
it approximates the average of the sites' updates B_i A_i, since
mean(B_i) mean(A_i) != mean(B_i A_i) in general; the two agree when the sites' adapters
agree (an exact rule, averaging the products, is not built).

`qlora` (CPU form): QLoRA (Dettmers et al. 2023) stores the frozen base in 4-bit NormalFloat
(NF4) with bitsandbytes on a CUDA GPU. Neither bitsandbytes' kernels nor a GPU run here, so
this rounds every frozen linear weight to the nearest of NF4's 16 levels in blocks of 64
(absmax scaling, as QLoRA does) and keeps it as float: the base has QLoRA's quantization
error, and none of its memory saving. Its label (`PeftSpec.label`) says so: `qlora (NF4
rounding on CPU)`; the run's config.yaml records the spec as given.
"""

from __future__ import annotations

import torch

from powertrip.core.config import ConfigError
from powertrip.core.peftspec import EXTRA_HINT, METHODS, PeftSpec

__all__ = ["EXTRA_HINT", "METHODS", "NF4_LEVELS", "AdapterOnly", "PeftSpec", "nf4_round",
           "with_adapters"]  # fmt: skip

#: QLoRA's NF4 levels (Dettmers et al. 2023, Appendix E; bitsandbytes' table)
NF4_LEVELS = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
)  # fmt: skip
NF4_BLOCK = 64


def nf4_round(weight: torch.Tensor) -> torch.Tensor:
    """`weight` rounded to NF4 in blocks of NF4_BLOCK (absmax scaling), returned as float."""
    flat = weight.detach().reshape(-1)
    pad = (-flat.numel()) % NF4_BLOCK
    blocks = torch.nn.functional.pad(flat, (0, pad)).reshape(-1, NF4_BLOCK)
    scale = blocks.abs().amax(dim=1, keepdim=True).clamp_min(torch.finfo(weight.dtype).tiny)
    levels = torch.tensor(NF4_LEVELS, dtype=weight.dtype)
    index = (blocks / scale).unsqueeze(-1).sub(levels).abs().argmin(dim=-1)
    rounded = (levels[index] * scale).reshape(-1)[: flat.numel()]
    return rounded.reshape(weight.shape)


def with_adapters(model, spec: PeftSpec):
    """`model` with LoRA adapters on `spec.targets`, its own weights frozen (and, for qlora,
    its frozen linear weights rounded to NF4 first); returns an `AdapterOnly` module."""
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError as exc:
        raise ConfigError(f"peft={spec.method} needs the peft library: {EXTRA_HINT}") from exc
    if spec.method == "qlora":
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, torch.nn.Linear):
                    module.weight.copy_(nf4_round(module.weight))
    config = LoraConfig(
        r=spec.r,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=list(spec.targets),
    )
    try:
        model = inject_adapter_in_model(config, model)
    except ValueError as exc:  # peft: no module matched the targets
        raise ConfigError(f"peft: targets {'+'.join(spec.targets)}: {exc}") from None
    for name, param in model.named_parameters():
        param.requires_grad = "lora_" in name
    return AdapterOnly(model)


class AdapterOnly(torch.nn.Module):
    """The trainable (adapter) parameters of `model` as this module's whole state.

    `model` is kept outside the module tree (not a submodule), so `state_dict()`,
    `parameters()` and `load_state_dict()` see the adapters alone, under their own names with
    `.` as `__`; they are the very Parameter objects `model` computes with, so loading a
    state or stepping an optimizer changes what `model` computes. The frozen base is never
    part of an update, a checkpoint or a model download."""

    def __init__(self, model) -> None:
        super().__init__()
        self.__dict__["inner"] = model
        self.adapters = torch.nn.ParameterDict(
            {
                name.replace(".", "__"): param
                for name, param in model.named_parameters()
                if param.requires_grad
            }
        )
        if not len(self.adapters):
            raise ConfigError("peft: the model has no trainable adapter parameters")

    @property
    def base(self):
        """The whole model (frozen base and adapters)."""
        return self.__dict__["inner"]

    def forward(self, *args, **kwargs):
        return self.base(*args, **kwargs)

    def train(self, mode: bool = True):
        self.base.train(mode)
        return super().train(mode)

    def _apply(self, fn, *args, **kwargs):
        """Device and dtype moves go through the whole model once; the adapters are its own
        Parameters, so they are taken from it again (a conversion may make new ones) rather
        than converted a second time here."""
        self.base._apply(fn, *args, **kwargs)
        params = dict(self.base.named_parameters())
        for key in list(self.adapters):
            self.adapters[key] = params[key.replace("__", ".")]
        return self
