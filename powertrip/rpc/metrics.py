"""What every service's Prometheus registry carries besides its own metrics.

Each service keeps its metrics on a registry of its own (no process-global state), so the
standard collectors prometheus_client puts on its default registry would be missing; this
module adds them back, with the build's versions, in one place for the four services:

* `process_*` (CPU seconds, resident memory, open file descriptors, start time),
* `python_info` and `python_gc_*`,
* `powertrip_build_info{version, python, grpc} 1`.
"""

from __future__ import annotations

import importlib.metadata
import platform

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)

import powertrip

BUILD_INFO = "powertrip_build_info"


def build_versions() -> dict[str, str]:
    """The labels of powertrip_build_info: this package's, Python's and grpcio's versions."""
    try:
        version = importlib.metadata.version("powertrip")
    except importlib.metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        version = powertrip.__version__
    try:
        grpc_version = importlib.metadata.version("grpcio")
    except importlib.metadata.PackageNotFoundError:
        grpc_version = "unknown"
    return {"version": version, "python": platform.python_version(), "grpc": grpc_version}


def add_standard_metrics(registry: CollectorRegistry) -> CollectorRegistry:
    """Register the process, platform and GC collectors and powertrip_build_info on
    `registry` (once: a second call would register the same names twice and raise)."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    versions = build_versions()
    info = Gauge(
        BUILD_INFO,
        "PowerTrip build: package, Python and grpcio versions (always 1)",
        sorted(versions),
        registry=registry,
    )
    info.labels(**versions).set(1)
    return registry


def service_registry() -> CollectorRegistry:
    """A new registry for one service process, with the standard metrics already on it."""
    return add_standard_metrics(CollectorRegistry())
