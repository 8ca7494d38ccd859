"""`make bench`: PowerTrip's speed as ratios against references measured in the same run.

Figures (issue 7), each next to its reference, measured interleaved (reference, candidate,
reference, ...) `--repeat` times so that a machine whose speed drifts (shared cores) moves
both alike; the ratio is the median of the pairwise ratios:

* train_site_steps_per_s: the system's simulated rounds (4 services as processes, gRPC, real
  deltas, `static` k sites of FEMNIST, the LEAF CNN, batch 20) vs loop_site_steps_per_s (a
  bare sequential torch loop doing the same steps, written plainly below, all cores' threads)
  and flower_site_steps_per_s (Flower's simulation of the same work; `pip install .[bench]`);
  train_gflops (steps/s x FLOPs per step from torch's FLOP counter) and train_vs_gemm,
  against a 3072 x 3072 fp32 torch.mm on every core measured in the same run.
* transfer_MBps: a 26 MB model download + delta upload through the real aggregator service
  and the site worker's own client code on loopback vs raw_tcp_MBps (a plain socket, same
  bytes).
* pinned_vs_native (bench/kernels.py): the bare loop with the CPU kernels pinned to AVX2, as
  every run has them by default, against the CPU's own (`POWERTRIP_CPU_KERNELS=native`).
* fedavg_GBps over 100 CNN deltas vs memcpy_GBps, with the aggregating process's peak RSS.
* int8_wire_bytes_ratio, int8_encode_vs_fp32, int8_receive_fedavg_vs_fp32
  (bench/deltawire.py): int8 deltas' bytes, the site's encode and the aggregator's
  receive-check-decode-sum against fp32's in the same run.
* select_ms_p99 for SelectSites over gRPC at 100, 1,000 and 10,000 sites.
* scale_overhead_ms (bench/scale.py): a real round's time outside training (profiles,
  selection, dispatch, aggregation, records) at 100 to 100,000 sites, its growth between
  sizes, and the aggregator's RSS per site.
* bare_grpc_MBps (no target): the same bytes through gRPC alone, Python gRPC's own ceiling;
  transfer_{down,up}_vs_bare_grpc: each direction of the service path against it.
  checked_tcp_vs_tcp (no target): raw TCP between two processes doing only the per-byte work
  the contract requires (CRC-32C both ends, finite check, FedAvg add), the ceiling of any
  transport that keeps it; transfer_vs_checked_tcp: the service path against that ceiling.
* gpu_site_steps_per_s (where torch sees a CUDA GPU): 100 FEMNIST sites in one vmap call
  on the GPU vs gpu_loop_site_steps_per_s, the plain sequential loop on the same GPU.
* qlora_base_memory_ratio (CUDA GPU and bitsandbytes): QLoRA's 4-bit base against LoRA's
  float32 base, GPU memory held and peak in training, and step time (bench/qlora.py).
* run_startup_s (bench/startup.py): one run's wall outside its round (CLI, services up and
  down, the report) against `python -c "import torch"` (startup_vs_torch_import).
* demo_wall_s, demo_vs_loop, demo_vs_work (only with --demo: it takes minutes): the default
  `make demo` comparison against the bare loop doing its site-steps, and against that plus
  a bare forward pass over the samples it evaluated (bench/demo.py).

Writes this run's figures to bench/results/latest.json (`--out`) and prints a table, and
merges them into the committed record, bench/results/results.json (`--record`;
bench/record.py): each benchmark that measured a figure replaces its own entry, with this
run's machine, date and command, and the others keep theirs, so `--only startup` updates
start-up alone. `make docs` renders bench/RESULTS.md and the docs' tables from the record
(bench/render.py). `--quick` is a smoke run: it is never merged into the record.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `bench` and `powertrip` from this checkout, from any cwd
# The references get the environment the services get (powertrip/app/experiments/launcher.py):
# OpenMP threads that sleep between regions. Before torch loads, which reads it once. On a
# shared machine the bare loop on 2 spinning threads measured 3.0 site-steps/s, 9.9 sleeping.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# ... and the CPU kernels the services run (pinned unless POWERTRIP_CPU_KERNELS=native), so a
# reference in this process (the bare loop) is measured under the same kernel setting as
# the system it is set against; children inherit the variables
from powertrip.core.kernels import configure_torch, pin_cpu_kernels  # noqa: E402

pin_cpu_kernels()
configure_torch()

import torch  # noqa: E402  (configured above; its version goes with the figures)

# One module per figure, each with measure(args, work, results) -> dict (bench/__init__.py).
from bench import (  # noqa: E402
    deltawire,
    demo,
    fedavg,
    flower,
    gpu,
    kernels,
    qlora,
    record,
    scale,
    select_sites,
    startup,
    train,
    transfer,
)
from powertrip.core.kernels import cpu_identity, kernel_mode  # noqa: E402

# `--only` names -> modules, in the order they run (and their figures appear in the table).
BENCHMARKS = {
    "train": train,
    "kernels": kernels,
    "flower": flower,
    "transfer": transfer,
    "fedavg": fedavg,
    "deltawire": deltawire,
    "select": select_sites,
    "scale": scale,
    "gpu": gpu,
    "qlora": qlora,
    "startup": startup,
}


def contention() -> str:
    """The load on the machine, recorded at the start and end: shared cores skew figures."""
    load1, load5, _ = os.getloadavg()
    return f"load average {load1:.1f} (1 min) / {load5:.1f} (5 min) on {os.cpu_count()} cores"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sites", type=int, default=20, help="sites per round (training)")
    parser.add_argument("--steps", type=int, default=10, help="local steps per site")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per system/Flower run")
    parser.add_argument("--repeat", type=int, default=2, help="interleaved repetitions")
    parser.add_argument(
        "--system-args", default="", help="extra `powertrip run` flags, e.g. '--trainer vmap'"
    )
    parser.add_argument("--no-flower", action="store_true", help="skip the Flower reference")
    parser.add_argument("--demo", action="store_true", help="also time `make demo` (minutes)")
    parser.add_argument("--quick", action="store_true", help="smoke run: small and fast")
    parser.add_argument(
        "--only",
        help="comma-separated: train,kernels,flower,transfer,fedavg,deltawire,select,scale,gpu,"
        "qlora,startup",
    )
    parser.add_argument(
        "--scale-sizes", help="site counts for scale (default 100,1000,10000,100000)"
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "latest.json"))
    parser.add_argument(
        "--record", default=str(record.RECORD), help="the committed record this run merges into"
    )
    parser.add_argument(
        "--no-record", action="store_true", help="write --out only; leave the record alone"
    )
    args = parser.parse_args()

    if args.quick:
        args.sites, args.steps, args.rounds, args.repeat = 4, 3, 2, 1
    parts = set((args.only or ",".join(BENCHMARKS)).split(","))
    out_json = Path(args.out)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="powertrip-bench-"))
    cores = os.cpu_count() or 1
    results: dict = {
        "machine": f"{cpu_identity()['model']} {cores} cores, "
        f"{platform.system()} {platform.release()}",
        "date": time.strftime("%F %T %Z"),
        "command": " ".join([Path(sys.executable).name, "bench/run.py", *sys.argv[1:]]),
        "torch": torch.__version__,
        "kernels": kernel_mode(),
        "load_at_start": contention(),
    }

    if args.no_flower:
        parts.discard("flower")
    per_benchmark: dict[str, dict] = {}  # each benchmark's own figures, for the record
    for name, module in BENCHMARKS.items():
        if name in parts:
            per_benchmark[name] = module.measure(args, work, results)
            results.update(per_benchmark[name])

    # always: says when it is not measured (then the record keeps the demo's last figures)
    per_benchmark["demo"] = demo.measure(args, work, results)
    results.update(per_benchmark["demo"])

    results["load_at_end"] = contention()
    out_json.write_text(json.dumps(results, indent=2) + "\n")
    recorded = record.update(
        Path(args.record), results, per_benchmark, quick=args.quick or args.no_record
    )
    shutil.rmtree(work, ignore_errors=True)
    width = max(len(k) for k in results)
    for key, value in results.items():
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {text}")
    print(f"written: {out_json}")
    if recorded:
        print(f"recorded in {args.record}: {', '.join(recorded)} (run `make docs` to render)")
    else:
        why = "--quick" if args.quick else "--no-record" if args.no_record else "nothing measured"
        print(f"not recorded in {args.record} ({why})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
