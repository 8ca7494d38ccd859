"""train_site_steps_per_s: the system's simulated rounds vs the same steps as a bare loop.

Also train_gflops (steps/s x FLOPs per step, torch's FLOP counter) and train_vs_gemm: the
physical limit is this machine's own large fp32 `torch.mm` rate on every core, measured in
the same run (the nominal peak from /proc/cpuinfo's clock is kept beside it, but the cores
boost past it, so it is not a limit).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import BATCH, LR, NUM_SITES, ROOT, WORKLOAD, femnist_sites, median_ratio


def bare_loop_steps_per_s(sites: list[int], steps: int, threads: int) -> float:
    """The reference: the same local work written plainly, one site after another.

    Each site starts from the global weights, takes `steps` SGD steps on its own batches of
    20 and hands back trained - global, as the system's sites do. One site trains untimed
    first: a process's first steps pay one-time costs (oneDNN primitives, the allocator's
    first pages) that the system's figures skip with their warm-up round; without it the
    first call in a process measured 15-25 % slower than the next (31.7 against 37.0,
    32.7 against 42.8 site-steps/s)."""
    import torch

    torch.set_num_threads(threads)
    workload, data, part = femnist_sites()
    torch.manual_seed(0)
    model = workload.build_model()
    global_weights = {k: v.clone() for k, v in model.state_dict().items()}
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_site(s: int) -> None:
        ix = part.site_indices[s]
        x = workload.inputs(data.train.x[ix])  # once per site, as float32
        y = torch.from_numpy(data.train.y[ix])
        model.load_state_dict(global_weights)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        gen = torch.Generator().manual_seed(s)
        order = torch.cat([torch.randperm(len(y), generator=gen) for _ in range(steps)])
        for step in range(steps):
            batch = order[step * BATCH : (step + 1) * BATCH]
            optimizer.zero_grad()
            loss = loss_fn(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
        _delta = {k: v - global_weights[k] for k, v in model.state_dict().items()}

    train_site(sites[0])  # warm-up, untimed
    start = time.perf_counter()
    for s in sites:
        train_site(s)
    return len(sites) * steps / (time.perf_counter() - start)


def bare_forward_samples_per_s(threads: int, samples: int = 2000) -> float:
    """The evaluation's reference: the held-out forward pass written plainly, the model in
    inference mode over `samples` test samples in batches of 500, one untimed pass first."""
    import torch

    torch.set_num_threads(threads)
    workload, data, _ = femnist_sites()
    torch.manual_seed(0)
    model = workload.build_model().eval()
    x = workload.inputs(data.test.x[:samples])

    def forward() -> None:
        with torch.inference_mode():
            for start in range(0, len(x), 500):
                model(x[start : start + 500]).argmax(dim=1)

    forward()  # warm-up, untimed
    start = time.perf_counter()
    forward()
    return len(x) / (time.perf_counter() - start)


def system_steps_per_s(
    sites: int, steps: int, rounds: int, out: Path, extra: list[str]
) -> tuple[float, list[int]]:
    """The system's simulated rounds (services, gRPC, real deltas): the rounds' wall time from
    selection until the last delta is in (evaluation excluded), warm-up round skipped."""
    run_dir = out / "system-run"
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [
        sys.executable, "-m", "powertrip.app.cli", "run",
        "--workload", WORKLOAD, "--sites", str(NUM_SITES),
        "--policy", "static", "--param", f"k={sites}",
        "--max-rounds", str(rounds), "--target-accuracy", "1.0",
        "--out", str(run_dir), "--quiet", *extra,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"system run failed: {done.stderr[-2000:]}")
    rows = list(csv.DictReader((run_dir / "wall.csv").open()))[1:]
    train_s = sum(float(r["wall_train_s"]) for r in rows)
    chosen = next(csv.DictReader((run_dir / "rounds.csv").open()))["sites"].split(";")
    return len(rows) * sites * steps / train_s, [int(s.split("-")[-1]) for s in chosen]


def flops_per_step() -> float:
    """FLOPs of one forward + backward of the CNN on a batch of 20 (torch's FLOP counter)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from powertrip.core.workloads import get_workload

    model = get_workload(WORKLOAD).build_model()
    x = torch.randn(BATCH, 1, 28, 28)
    y = torch.randint(0, 62, (BATCH,))
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    return float(counter.get_total_flops())


GEMM_N = 3072  # a 3072 x 3072 fp32 product: 58 GFLOP, large enough for MKL's peak on 2 cores


def gemm_gflops(threads: int, n: int = GEMM_N, reps: int = 5) -> float:
    """Best rate of an n x n fp32 `torch.mm` on `threads` threads (one warm-up first).

    Best, not median: the limit is what the cores can do, and a shared machine only ever
    makes a product slower."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)
    torch.mm(a, b, out=c)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        torch.mm(a, b, out=c)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def peak_gflops(cores: int) -> tuple[float, str]:
    """fp32 peak of the cores: 2 x 256-bit FMA per cycle = 32 FLOP/cycle/core with AVX2+FMA."""
    mhz, flags = None, ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz") and mhz is None:
                mhz = float(line.split(":")[1])
            if line.startswith("flags") and not flags:
                flags = line
    except OSError:
        pass
    per_cycle = 32 if (" avx2" in flags and " fma" in flags) else 16
    ghz = (mhz or 3000.0) / 1000
    peak = cores * per_cycle * ghz
    return peak, (
        f"{cores} cores x {per_cycle} fp32 FLOP/cycle "
        f"({'AVX2 2xFMA' if per_cycle == 32 else 'SSE/AVX'}) x {ghz:.2f} GHz (/proc/cpuinfo)"
    )


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    """System and loop interleaved `--repeat` times, the loop on the sites the system chose."""
    cores = os.cpu_count() or 1
    out: dict = {}
    print(f"training: system vs bare loop, x{args.repeat} interleaved ...", flush=True)
    extra = args.system_args.split()
    system, loop, gemm = [], [], []
    for _ in range(args.repeat):
        rate, chosen = system_steps_per_s(args.sites, args.steps, args.rounds, work, extra)
        system.append(rate)
        loop.append(bare_loop_steps_per_s(chosen, args.steps, cores))
        gemm.append(gemm_gflops(cores))
    out["train_site_steps_per_s"] = statistics.median(system)
    out["loop_site_steps_per_s"] = statistics.median(loop)
    out["train_vs_loop"] = median_ratio(system, loop)
    out["train_runs"] = [round(v, 2) for v in system]
    out["loop_runs"] = [round(v, 2) for v in loop]
    flops = flops_per_step()
    peak, assumption = peak_gflops(cores)
    out["gflop_per_step"] = flops / 1e9
    out["train_gflops"] = out["train_site_steps_per_s"] * flops / 1e9
    out["gemm_gflops"] = max(gemm)
    out["gemm_runs"] = [round(v, 1) for v in gemm]
    out["train_vs_gemm"] = out["train_gflops"] / out["gemm_gflops"]
    out["loop_vs_gemm"] = out["loop_site_steps_per_s"] * flops / 1e9 / out["gemm_gflops"]
    out["nominal_peak_gflops"] = peak
    out["nominal_peak_assumption"] = assumption
    return out
