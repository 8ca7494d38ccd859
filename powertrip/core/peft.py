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

`qlora`: QLoRA (Dettmers et al. 2023) stores the frozen base in 4-bit NormalFloat (NF4) and
computes with it dequantized. It takes one of two forms, by the device the model is built for
(`qlora_form`); both give the base the same values:

* **4-bit** (a CUDA device with bitsandbytes installed, extra `[qlora]`): every frozen linear
  layer becomes a bitsandbytes `Linear4bit`, NF4 in blocks of 64, its weight held as packed
  4-bit codes plus one float32 absmax per block (4.5 bits a weight instead of 32). OUR
  CHOICE: no double quantization (QLoRA's `compress_statistics`), so the codes dequantize to
  exactly the rounded form's values (checked bit for bit on an H200,
  tests/unit/test_qlora_4bit.py), and the aggregator, which evaluates on its CPU with the
  rounded form, scores the base the sites train on. A linear layer whose weight is tied to
  an embedding (the decoder's output layer) cannot be 4-bit without untying it: it is
  rounded in place, as transformers' bitsandbytes loader keeps `lm_head` unquantized.
* **rounded** (a CPU, or CUDA without bitsandbytes): every frozen linear weight is rounded to
  the nearest of NF4's 16 levels in blocks of 64 (absmax scaling, as QLoRA does) and kept as
  float: QLoRA's quantization error, none of its memory saving. Not bitsandbytes on a CPU:
  its CPU 4-bit matmul, in evaluation on a CPU with AVX512-BF16 (this project's machines),
  repacks the weight and computes in bfloat16 (0.12 off on a 64-wide layer here), which
  would no longer be the NF4 base in float32.

Which form a model got is logged (`with_adapters`); `PeftSpec.label` names the rounded form,
which made every committed run (`qlora (NF4 rounding on CPU)`). The run's config.yaml
records the spec as given.
"""

from __future__ import annotations

import importlib.util
import logging

import torch

from powertrip.core.config import ConfigError
from powertrip.core.peftspec import EXTRA_HINT, METHODS, PeftSpec

__all__ = ["EXTRA_HINT", "METHODS", "NF4_LEVELS", "QLORA_EXTRA_HINT", "QLORA_FORMS",
           "AdapterOnly", "PeftSpec", "nf4_round", "qlora_form", "quantize_base",
           "with_adapters"]  # fmt: skip

log = logging.getLogger(__name__)

#: how qlora holds its frozen base (module docstring)
QLORA_FORMS = ("4bit", "rounded")
QLORA_EXTRA_HINT = "pip install 'powertrip[qlora]' (bitsandbytes)"

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
    levels = torch.tensor(NF4_LEVELS, dtype=weight.dtype, device=weight.device)
    index = (blocks / scale).unsqueeze(-1).sub(levels).abs().argmin(dim=-1)
    rounded = (levels[index] * scale).reshape(-1)[: flat.numel()]
    return rounded.reshape(weight.shape)


def have_bitsandbytes() -> bool:
    """bitsandbytes is installed (not imported: on a machine without CUDA importing it only
    costs time)."""
    return importlib.util.find_spec("bitsandbytes") is not None


def qlora_form(device: str, bitsandbytes_installed: bool) -> str:
    """'4bit' on a CUDA device with bitsandbytes, else 'rounded' (module docstring: why the
    4-bit form is not used on a CPU)."""
    return "4bit" if device.startswith("cuda") and bitsandbytes_installed else "rounded"


def quantize_base(model: torch.nn.Module, form: str, device: str = "cpu") -> int:
    """Give `model`'s linear layers QLoRA's NF4 base in `form` (QLORA_FORMS), in place;
    returns how many layers became 4-bit. Under '4bit' the layers are quantized on `device`
    (bitsandbytes packs the codes where the tensor lands); a linear layer whose weight is
    shared with another module (tied) is rounded instead, in both forms."""
    if form not in QLORA_FORMS:
        raise ValueError(f"qlora form must be one of {', '.join(QLORA_FORMS)}, got {form!r}")
    shared = {
        id(p)
        for m in model.modules()
        if not isinstance(m, torch.nn.Linear)
        for p in m.parameters(recurse=False)
    }
    four_bit = 0
    with torch.no_grad():
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if not isinstance(child, torch.nn.Linear):
                    continue
                if form == "4bit" and id(child.weight) not in shared:
                    setattr(parent, name, _linear_4bit(child, device))
                    four_bit += 1
                else:
                    child.weight.copy_(nf4_round(child.weight))
    return four_bit


def _linear_4bit(linear: torch.nn.Linear, device: str):
    """`linear` as a bitsandbytes NF4 Linear4bit on `device`, quantized there, computing in
    the weight's own dtype; no double quantization (module docstring)."""
    try:
        import bitsandbytes as bnb
    except ImportError as exc:  # pragma: no cover - with_adapters asks have_bitsandbytes first
        raise ConfigError(f"peft=qlora in 4 bits needs bitsandbytes: {QLORA_EXTRA_HINT}") from exc
    dtype = linear.weight.dtype
    # Linear4bit initialises a weight it is then given: on the meta device, so that it
    # draws nothing from torch's generator and the adapters start as in the rounded form
    layer = bnb.nn.Linear4bit(
        linear.in_features,
        linear.out_features,
        bias=linear.bias is not None,
        compute_dtype=dtype,
        compress_statistics=False,
        quant_type="nf4",
        device="meta",
    )
    layer.weight = bnb.nn.Params4bit(
        linear.weight.detach().clone(),
        requires_grad=False,
        blocksize=NF4_BLOCK,
        compress_statistics=False,
        quant_type="nf4",
        module=layer,
    )
    if linear.bias is not None:
        layer.bias = torch.nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
    return layer.to(device)


def with_adapters(model, spec: PeftSpec, device: str = "cpu"):
    """`model` with LoRA adapters on `spec.targets`, its own weights frozen (and, for qlora,
    its frozen linear layers given the NF4 base first, in the form `device` calls for:
    `qlora_form`); returns an `AdapterOnly` module. The caller still moves it to `device`."""
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError as exc:
        raise ConfigError(f"peft={spec.method} needs the peft library: {EXTRA_HINT}") from exc
    if spec.method == "qlora":
        installed = have_bitsandbytes()
        form = qlora_form(device, installed)
        four_bit = quantize_base(model, form, device)
        if form == "4bit":
            log.info("qlora: %d linear layers hold the base in 4-bit NF4 on %s", four_bit, device)
        elif device.startswith("cuda") and not installed:
            log.warning(
                "qlora on %s without bitsandbytes: the base is NF4-rounded float32, with "
                "none of QLoRA's memory saving; %s",
                device, QLORA_EXTRA_HINT,
            )  # fmt: skip
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
