"""gpu_site_steps_per_s: 100 FEMNIST sites in one vmap call on CUDA vs the sequential loop.

Only where torch sees a CUDA GPU; otherwise the table says why it was not measured.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench.common import BATCH, LR, femnist_sites, median_ratio


def gpu_loop_once(workload, model, jobs, steps: int) -> None:
    """The GPU reference, written plainly: one site after another on the same GPU, each from
    the global weights, its data moved to the GPU once, `steps` SGD steps, delta kept there."""
    import torch

    global_weights = {k: v.clone() for k, v in model.state_dict().items()}
    loss_fn = torch.nn.CrossEntropyLoss()
    for job in jobs:
        x = workload.inputs(job.x).cuda()
        y = torch.from_numpy(job.y).cuda()
        model.load_state_dict(global_weights)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        gen = torch.Generator().manual_seed(job.seed)
        order = torch.cat([torch.randperm(len(y), generator=gen) for _ in range(steps)]).cuda()
        for step in range(steps):
            batch = order[step * BATCH : (step + 1) * BATCH]
            optimizer.zero_grad()
            loss_fn(model(x[batch]), y[batch]).backward()
            optimizer.step()
        _delta = {k: v - global_weights[k] for k, v in model.state_dict().items()}
    model.load_state_dict(global_weights)
    torch.cuda.synchronize()


def gpu_figures(steps: int, repeat: int) -> dict:
    """gpu_site_steps_per_s: all 100 virtual sites in one `torch.func.vmap` call on CUDA
    (`powertrip.core.batched`, as a site worker runs with --device cuda --trainer vmap
    --site-batch 100), deltas back on the host; vs gpu_loop_site_steps_per_s, the plain
    sequential loop on the same GPU. Also the largest difference between the two trainers'
    deltas for the same sites and seeds (`powertrip.core.training.train_local` on the GPU)."""
    import torch

    from powertrip.core.batched import SiteJob, train_sites
    from powertrip.core.training import train_local

    if not torch.cuda.is_available():
        return {"gpu": f"not measured: torch {torch.__version__} sees no CUDA GPU"}
    workload, data, part = femnist_sites()
    torch.manual_seed(0)
    model = workload.build_model().cuda()
    jobs = [
        SiteJob(x=data.train.x[ix], y=data.train.y[ix], seed=site)
        for site, ix in enumerate(part.site_indices)
    ]

    def batched() -> None:
        train_sites(
            workload, model, jobs, steps=steps, lr=LR, batch_size=BATCH,
            trainer="vmap", site_batch=len(jobs),
        )  # fmt: skip
        torch.cuda.synchronize()

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        return len(jobs) * steps / (time.perf_counter() - start)

    batched()  # warm-up: kernels, allocator, cuDNN plans
    gpu_loop_once(workload, model, jobs, steps)
    vmap_rates, loop_rates = [], []
    for _ in range(repeat):
        loop_rates.append(timed(lambda: gpu_loop_once(workload, model, jobs, steps)))
        vmap_rates.append(timed(batched))

    few = jobs[:4]  # same model update? vmap vs the plain per-site trainer, same seeds
    got = train_sites(
        workload, model, few, steps=steps, lr=LR, batch_size=BATCH,
        trainer="vmap", site_batch=len(few),
    )  # fmt: skip
    worst = 0.0
    for job, result in zip(few, got, strict=True):
        want = train_local(
            workload, model, job.x, job.y, steps=steps, lr=LR, batch_size=BATCH, seed=job.seed
        )
        for key, value in want.delta.items():
            scale = float(value.abs().max()) or 1.0
            worst = max(worst, float((result.delta[key] - value).abs().max()) / scale)
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu_name": f"{props.name}, {props.total_memory / 2**30:.0f} GiB, "
        f"torch {torch.__version__}, CUDA {torch.version.cuda}",
        "gpu_sites": len(jobs),
        "gpu_site_steps_per_s": statistics.median(vmap_rates),
        "gpu_loop_site_steps_per_s": statistics.median(loop_rates),
        "gpu_vs_loop": median_ratio(vmap_rates, loop_rates),
        "gpu_runs": [round(v, 1) for v in vmap_rates],
        "gpu_loop_runs": [round(v, 1) for v in loop_rates],
        "gpu_vmap_vs_loop_max_rel_diff": worst,
        "gpu_peak_mem_GiB": torch.cuda.max_memory_allocated() / 2**30,
    }


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    """At least 3 interleaved repetitions: a GPU run is short."""
    print("gpu: 100 sites batched on CUDA vs the sequential GPU loop ...", flush=True)
    return gpu_figures(args.steps, max(3, args.repeat))
