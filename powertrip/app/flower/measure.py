"""Measure on a node what its site profile says, so a ClientApp author need not guess:

    serve_profile(app, lambda context: measure_profile(
        "aggregator.example.org:443", bandwidth_url="https://aggregator.example.org/probe"))

* power: the share of full power the node's GPUs may draw now, from NVML (the `gpu` extra,
  nvidia-ml-py): the enforced power limit over the largest limit the GPUs allow, summed over
  every GPU. A site with less spare power runs under a lower cap, and its local work takes
  tau / p longer (the paper's time model). Without NVML or a GPU, `power_fraction` says so
  and the caller passes its own.
* latency: half the fastest of a few TCP connects to the endpoint (a connect is one round
  trip), so it includes no server work.
* bandwidth: bytes per second of an HTTP(S) GET from the endpoint's side, up to `max_bytes`;
  without a URL to fetch, the caller passes its own.

Each is a single measurement now: a node calls `measure_profile` again each round (the
strategy asks every round), or caches it, as its link warrants.
"""

from __future__ import annotations

import socket
import time
import urllib.request

from powertrip.app.flower.profiles import SiteProfile

DEFAULT_PROBES = 5
DEFAULT_MAX_BYTES = 8 * 2**20


def gpu_power_fraction() -> tuple[float | None, str]:
    """(enforced power limit / maximum power limit over all GPUs, "") where NVML works and
    sees a GPU, else (None, why not)."""
    try:
        import pynvml  # nvidia-ml-py: the `gpu` extra
    except ImportError:
        return None, "nvidia-ml-py is not installed (the `gpu` extra: pip install -e '.[gpu]')"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML unavailable: {exc}"
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return None, "NVML sees no GPU"
        enforced = most = 0.0
        for index in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            enforced += pynvml.nvmlDeviceGetEnforcedPowerLimit(handle)  # mW
            most += pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)[1]  # (min, max)
        if most <= 0:
            return None, "NVML reports no power limit"
        return min(1.0, enforced / most), ""
    except Exception as exc:  # a GPU without power management
        return None, f"NVML cannot read power limits: {exc}"
    finally:
        pynvml.nvmlShutdown()


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """An endpoint, "host:port" or "[v6]:port", as (host, port)."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"endpoint {endpoint!r} is not host:port")
    return host.strip("[]"), int(port)


def link_latency_s(endpoint: str, probes: int = DEFAULT_PROBES, timeout_s: float = 5.0) -> float:
    """One-way delay to `endpoint` ("host:port"): half the fastest TCP connect of `probes`
    (the fastest, because queueing only ever adds to the propagation delay)."""
    host, port = split_endpoint(endpoint)
    fastest = float("inf")
    for _ in range(max(1, probes)):
        started = time.perf_counter()
        with socket.create_connection((host, port), timeout=timeout_s):
            fastest = min(fastest, time.perf_counter() - started)
    return fastest / 2


def link_bandwidth_bytes_per_s(
    url: str, max_bytes: int = DEFAULT_MAX_BYTES, timeout_s: float = 30.0
) -> float:
    """Throughput of an HTTP(S) GET of `url`, reading at most `max_bytes` (the body is
    counted and dropped, never parsed), timed from the first byte so the connect is not
    counted as transfer."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        first = response.read(1)
        started, received = time.perf_counter(), len(first)
        while received < max_bytes:
            chunk = response.read(min(1 << 16, max_bytes - received))
            if not chunk:
                break
            received += len(chunk)
        elapsed = time.perf_counter() - started
    if received < 2 or elapsed <= 0:
        raise ValueError(f"{url}: too little data to time ({received} bytes)")
    return (received - len(first)) / elapsed


def measure_profile(
    endpoint: str,
    *,
    bandwidth_url: str | None = None,
    bandwidth_bytes_per_s: float | None = None,
    power_fraction: float | None = None,
    site_id: str = "",
    probes: int = DEFAULT_PROBES,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> SiteProfile:
    """This node's profile, measured where it can be: power from NVML unless given, latency
    to `endpoint`, bandwidth from `bandwidth_url` unless given. What can be neither measured
    nor was given is an error that says which."""
    if power_fraction is None:
        power_fraction, why = gpu_power_fraction()
        if power_fraction is None:
            raise ValueError(f"no power_fraction given and none measured: {why}")
    if bandwidth_bytes_per_s is None:
        if bandwidth_url is None:
            raise ValueError("give bandwidth_url to measure bandwidth, or bandwidth_bytes_per_s")
        bandwidth_bytes_per_s = link_bandwidth_bytes_per_s(bandwidth_url, max_bytes)
    return SiteProfile(
        site_id=site_id,
        power_fraction=power_fraction,
        latency_s=link_latency_s(endpoint, probes),
        bandwidth_bytes_per_s=bandwidth_bytes_per_s,
    )
