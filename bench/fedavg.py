"""fedavg_GBps: streaming FedAvg over 100 CNN-sized deltas vs memcpy of the same bytes.

Measured in a fresh process, `python -m bench.fedavg NUM_DELTAS`, which prints one JSON
object: its peak RSS is then the aggregation's (fedavg_peak_rss_MB, fedavg_rss_growth_MB).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import ROOT

NUM_DELTAS = 100
DISTINCT_DELTAS = 8  # 211 MB of CNN deltas: more than the 32 MiB L3 of the bench machine


def fedavg_child(num_deltas: int) -> dict:
    """Streaming FedAvg over CNN-sized deltas in a fresh process, so its peak RSS is the
    aggregation's: RSS before the first delta vs at the end says whether memory is O(model)."""
    import resource

    from powertrip.core.fedavg import StreamingFedAvg

    def rss_mb() -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
        return 0.0

    # the CNN's tensors, as the aggregator holds them
    shapes = {
        "0.weight": (32, 1, 5, 5), "0.bias": (32,), "3.weight": (64, 32, 5, 5), "3.bias": (64,),
        "7.weight": (2048, 3136), "7.bias": (2048,), "9.weight": (62, 2048), "9.bias": (62,),
    }  # fmt: skip
    rng = np.random.default_rng(0)
    template = {k: np.zeros(s, np.float32) for k, s in shapes.items()}
    # distinct deltas, used in turn: the aggregator adds a fresh one each time, and one
    # delta used again would sit in cache for the copy and for FedAvg's folded groups
    ring = [
        {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
        for _ in range(DISTINCT_DELTAS)
    ]
    nbytes = sum(v.nbytes for v in ring[0].values())
    buf = {k: np.empty_like(v) for k, v in ring[0].items()}
    sites = [f"s{i}" for i in range(num_deltas)]
    fedavg_s, memcpy_s = [], []
    rss_before = rss_mb()
    for _ in range(3):  # interleaved: copy, aggregate, copy, aggregate, ...
        start = time.perf_counter()
        for i in range(num_deltas):
            for k, v in ring[i % DISTINCT_DELTAS].items():
                np.copyto(buf[k], v)
        memcpy_s.append(time.perf_counter() - start)
        acc = StreamingFedAvg(sites, template)
        start = time.perf_counter()
        for i, site in enumerate(sites):
            acc.add(site, ring[i % DISTINCT_DELTAS], 10.0)
        acc.result()
        fedavg_s.append(time.perf_counter() - start)
        del acc  # one accumulator alive at a time, as in the aggregator
    ratios = [m / f for m, f in zip(memcpy_s, fedavg_s, strict=True)]
    return {
        "fedavg_GBps": num_deltas * nbytes / statistics.median(fedavg_s) / 1e9,
        "memcpy_GBps": num_deltas * nbytes / statistics.median(memcpy_s) / 1e9,
        "fedavg_vs_memcpy": statistics.median(ratios),
        "fedavg_peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "fedavg_rss_growth_MB": rss_mb() - rss_before,
        "model_MB": nbytes / 1e6,
    }


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    """fedavg_child in a fresh process (see the module's docstring)."""
    print("fedavg: 100 deltas vs memcpy ...", flush=True)
    done = subprocess.run(
        [sys.executable, "-m", "bench.fedavg", str(NUM_DELTAS)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """The child's entry point: NUM_DELTAS -> one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("num_deltas", type=int, nargs="?", default=NUM_DELTAS)
    args = parser.parse_args(argv)
    print(json.dumps(fedavg_child(args.num_deltas)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
