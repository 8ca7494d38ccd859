"""Workload registry: a workload is one module here plus one entry below."""

from __future__ import annotations

from powertrip.core.config import ConfigError
from powertrip.core.peftspec import PeftSpec, PeftSpecError
from powertrip.core.workloads.base import (
    DataError,
    Dataset,
    Partition,
    Split,
    Workload,
    WorkloadDefaults,
)
from powertrip.core.workloads.femnist import FemnistWorkload
from powertrip.core.workloads.shakespeare import ShakespeareWorkload
from powertrip.core.workloads.shakespeare_lm import ShakespeareLMWorkload
from powertrip.core.workloads.speech import SpeechWorkload
from powertrip.core.workloads.synthetic import SyntheticWorkload

REGISTRY: dict[str, type[Workload]] = {
    "femnist": FemnistWorkload,
    "shakespeare": ShakespeareWorkload,
    "shakespeare-lm": ShakespeareLMWorkload,
    "speech": SpeechWorkload,
    "synthetic": SyntheticWorkload,
}


class UnknownWorkload(ValueError):
    pass


#: the workloads with a pretrained base, the only ones a `peft` method applies to
PEFT_WORKLOADS = ("shakespeare-lm",)


def get_workload(name: str, peft: str | None = None) -> Workload:
    """A fresh workload by name; `peft` (a run's spec, powertrip/core/peft.py) selects full
    fine-tuning (`none`) or adapters, for the workloads that have a pretrained base."""
    try:
        cls = REGISTRY[name]
    except KeyError:
        raise UnknownWorkload(
            f"unknown workload {name!r}; valid workloads: {', '.join(sorted(REGISTRY))}"
        ) from None
    try:
        spec = PeftSpec.parse(peft)
    except PeftSpecError as exc:
        raise ConfigError(str(exc)) from None
    if not spec.enabled:
        return cls()
    if name not in PEFT_WORKLOADS:
        raise ConfigError(
            f"peft={spec.method}: LoRA needs a pretrained base; workloads with one: "
            f"{', '.join(PEFT_WORKLOADS)}"
        )
    return cls(peft=spec)


__all__ = [
    "REGISTRY",
    "DataError",
    "Dataset",
    "Partition",
    "Split",
    "UnknownWorkload",
    "Workload",
    "WorkloadDefaults",
    "get_workload",
]
