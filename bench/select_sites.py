"""select_ms_p99: SelectSites over gRPC at 100, 1,000 and 10,000 sites.

(Not `select.py`: `python bench/run.py` puts bench/ on sys.path, where that name would
shadow the standard library's `select`.)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

SIZES = [100, 1000, 10000]


def _select_times(stub, request, calls: int, label: str) -> dict:
    """p99 and median milliseconds of `calls` SelectSites calls, keyed by `label`."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        stub.SelectSites(request, timeout=60)
        times.append((time.perf_counter() - start) * 1000)
    return {
        f"select_ms_p99_{label}": float(np.percentile(times, 99)),
        f"select_ms_median_{label}": float(np.median(times)),
    }


def select_p99_ms(sizes: list[int], calls: int, log_dir: Path) -> dict:
    """SelectSites over gRPC as the aggregator calls it (the sites as SiteColumns, with the
    7 shadow decisions), at each size; at the largest, also without shadows and with the
    sites as one SiteProfile message each (the contract's other form)."""
    from powertrip.app.experiments.launcher import start_service
    from powertrip.core.profiles import PopulationSpec, generate_population
    from powertrip.rpc.channels import open_channel
    from powertrip.rpc.heap import keep_buffers_on_heap
    from powertrip.rpc.runsettings import settings_of
    from powertrip.rpc.sitecolumns import columns_from_profiles
    from powertrip.v1 import common_pb2, policy_pb2, policy_pb2_grpc

    keep_buffers_on_heap()  # this process plays the aggregator, whose set-up does the same
    out = {}
    service = start_service("policy", [], log_dir)
    try:
        with open_channel(service.target) as channel:
            stub = policy_pb2_grpc.PolicyStub(channel)
            for n in sizes:
                sites = [
                    common_pb2.SiteProfile(
                        site_id=s.site_id,
                        power_fraction=s.power_fraction,
                        distance_miles=s.distance_miles,
                        latency_s=s.latency_s,
                        bandwidth_bytes_per_s=s.bandwidth_bytes_per_s,
                        gpus_available=s.gpus_available,
                        gpus_effective=int(s.power_fraction * s.gpus_available),
                        power_source="uniform",
                        alive=True,
                    )
                    for s in generate_population(PopulationSpec(num_sites=n, seed=0))
                ]
                history = [common_pb2.RoundRecord(round=1, k=max(2, n // 20), accuracy=0.1)]
                columns = columns_from_profiles(sites)
                # as the profiler sends them before any link is probed: no measured columns
                del columns.measured_latency_s[:], columns.measured_bandwidth_bytes_per_s[:]
                request = policy_pb2.SelectSitesRequest(
                    policy="powertrip",
                    site_columns=columns,
                    history=history,
                    update_size_bytes=1.5e9,
                    round=2,
                    settings=settings_of({"tau_s": 60.0, "comm_directions": 2, "shadow": True}),
                )
                stub.SelectSites(request, timeout=60)  # warm-up
                out.update(_select_times(stub, request, calls, str(n)))
            # the same at the largest size without the 7 shadow decisions (shadow=False)
            request.settings.values["shadow"] = "false"
            out.update(_select_times(stub, request, calls, f"{sizes[-1]}_no_shadows"))
            # and with shadows, the sites as messages (what callers outside the aggregator
            # may send)
            request.settings.values["shadow"] = "true"
            request.ClearField("site_columns")
            request.sites.extend(sites)
            out.update(_select_times(stub, request, calls, f"{sizes[-1]}_messages"))
    finally:
        service.stop()
    return out


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    """100 calls per size (20 with --quick) after one warm-up call."""
    print("select: SelectSites p99 over gRPC ...", flush=True)
    return select_p99_ms(SIZES, 20 if args.quick else 100, work / "logs")
