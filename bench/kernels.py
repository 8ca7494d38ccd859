"""pinned_vs_native: the speed cost of the pinned CPU kernels (powertrip.core.kernels).

Every run pins torch's kernels by default (ATen's AVX2 kernels, convolutions by ATen, MKL's
strict CNR GEMMs) so that a seed gives the same numbers at any thread count and on every
Intel CPU with AVX2; on a CPU with AVX-512 that gives up its wider kernels and oneDNN's
convolutions. The figure is the bare FEMNIST training loop (bench/train.py's reference: the
LEAF CNN, batch 20, the same sites and steps) in a fresh process per measurement, because the
kernel choice is made once per process: pinned (the default) against
`POWERTRIP_CPU_KERNELS=native`, interleaved `--repeat` times; the ratio is the median of the
pairwise ratios (above 1: pinned is faster). Each child also reports the kernels it ran, so
the table says what was compared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.common import ROOT, median_ratio
from powertrip.core.kernels import VARIABLES


def child(sites: int, steps: int) -> dict:
    """One measurement in this (fresh) process, the kernels as its environment says."""
    from powertrip.core.kernels import configure_torch, pin_cpu_kernels

    mode = pin_cpu_kernels()
    configure_torch()
    import torch

    from bench.train import bare_loop_steps_per_s

    rate = bare_loop_steps_per_s(list(range(sites)), steps, os.cpu_count() or 1)
    capability = torch.backends.cpu.get_cpu_capability()
    onednn = "oneDNN" if torch.backends.mkldnn.enabled else "ATen conv"
    return {"mode": mode, "capability": f"{capability}, {onednn}", "rate": rate}


def _measure_once(mode: str, sites: int, steps: int) -> dict:
    env = {**os.environ, "POWERTRIP_CPU_KERNELS": mode}
    for name in VARIABLES:
        env.pop(name, None)  # the bench's own environment must not decide for the child
    done = subprocess.run(
        [sys.executable, "-m", "bench.kernels", str(sites), str(steps)],
        capture_output=True, text=True, check=True, cwd=ROOT, env=env,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    """pinned and native, interleaved (see the module's docstring)."""
    print("kernels: the bare loop with pinned (AVX2) vs native CPU kernels ...", flush=True)
    pinned, native = [], []
    for _ in range(max(1, args.repeat)):
        native.append(_measure_once("native", args.sites, args.steps))
        pinned.append(_measure_once("pinned", args.sites, args.steps))
    return {
        "pinned_site_steps_per_s": pinned[-1]["rate"],
        "native_site_steps_per_s": native[-1]["rate"],
        "pinned_vs_native": median_ratio([p["rate"] for p in pinned], [n["rate"] for n in native]),
        "kernels_compared": f"pinned {pinned[-1]['capability']} vs native "
        f"{native[-1]['capability']}",
    }


def main(argv: list[str] | None = None) -> int:
    """The child's entry point: SITES STEPS -> one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sites", type=int)
    parser.add_argument("steps", type=int)
    args = parser.parse_args(argv)
    print(json.dumps(child(args.sites, args.steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
