"""Workload registry: a workload is one module here plus one entry below."""

from __future__ import annotations

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
from powertrip.core.workloads.speech import SpeechWorkload
from powertrip.core.workloads.synthetic import SyntheticWorkload

REGISTRY: dict[str, type[Workload]] = {
    "femnist": FemnistWorkload,
    "shakespeare": ShakespeareWorkload,
    "speech": SpeechWorkload,
    "synthetic": SyntheticWorkload,
}


class UnknownWorkload(ValueError):
    pass


def get_workload(name: str) -> Workload:
    try:
        return REGISTRY[name]()
    except KeyError:
        raise UnknownWorkload(
            f"unknown workload {name!r}; valid workloads: {', '.join(sorted(REGISTRY))}"
        ) from None


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
