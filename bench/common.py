"""What the benchmarks share: the workload they train and the ratio they report."""

from __future__ import annotations

import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKLOAD = "femnist"
LR = 0.1  # configs/demo.yaml
BATCH = 20
NUM_SITES = 100


def femnist_sites():
    """(workload, data, partition): FEMNIST split over the 100 sites every benchmark uses."""
    from powertrip.core.workloads import get_workload

    workload = get_workload(WORKLOAD)
    data = workload.load()
    part = workload.partition(data, NUM_SITES, 0)
    return workload, data, part


def median_ratio(candidate: list[float], reference: list[float]) -> float:
    """Median of the pairwise ratios of runs measured interleaved, so drift moves both alike."""
    return statistics.median(c / r for c, r in zip(candidate, reference, strict=True))
