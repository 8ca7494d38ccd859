"""Every service's metrics registry follows Prometheus' naming conventions (issue #18).

Each of the four services' registries is built the way its `__main__` and `serve` build it
(`powertrip.rpc.metrics.service_registry`, the service's metrics class, the malformed-request
counter of `start_server`), with one child per labelled metric so every name is exposed,
rendered with `generate_latest`, and then:

* checked by `promtool check metrics` (no warnings) when promtool is installed;
* checked here, always, for the conventions promtool does not know: `_total` only on
  counters, units as suffixes (`_seconds`, `_bytes`, `_bytes_per_second`), 0-1 values as
  `_ratio`, one meaning (help and type) per name across services, the standard `process_*`
  and `python_*` metrics, and `powertrip_build_info`.

tests/unit/test_deploy_files.py uses `exposed_names()` to check that the dashboard and the
alert rules query only series that exist.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.metrics import MetricWrapperBase

import powertrip
from powertrip.rpc.metrics import BUILD_INFO, build_versions, service_registry
from services.aggregator.metrics import AggregatorMetrics
from services.policy.servicer import PolicyMetrics
from services.profiler.servicer import ProfilerMetrics
from services.site_worker.metrics import SiteWorkerMetrics

SERVICES = ("aggregator", "policy", "profiler", "site_worker")
METRICS_CLASSES: dict[str, Callable[[CollectorRegistry], object] | None] = {
    "aggregator": lambda registry: AggregatorMetrics(registry, round_deadline_s=600),
    "policy": PolicyMetrics,
    "profiler": ProfilerMetrics,
    "site_worker": SiteWorkerMetrics,
}


def promtool() -> str | None:
    """POWERTRIP_PROMTOOL, else promtool on PATH (.ci/run installs it from Debian's
    prometheus package)."""
    return os.environ.get("POWERTRIP_PROMTOOL") or shutil.which("promtool")


def _with_children(metrics: object) -> None:
    """One child per labelled metric, so a name with no samples yet is exposed too."""
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase) and value._labelnames:
            value.labels(*["x"] * len(value._labelnames))


def build_registry(service: str) -> CollectorRegistry:
    """The registry `python -m services.<service>` serves on its metrics port."""
    registry = service_registry()
    make = METRICS_CLASSES[service]
    if make is not None:
        _with_children(make(registry))
    try:  # start_server counts malformed requests on the service's registry
        from powertrip.rpc.malformed import malformed_counter
    except ImportError:
        pass
    else:
        malformed_counter(registry).labels("/x.Service/Method")
    return registry


def families(registry: CollectorRegistry) -> list:
    return list(registry.collect())


def exposed_names() -> set[str]:
    """Every sample name any service exposes (counters' `_total`, histograms' `_bucket`...)."""
    return {
        sample.name
        for service in SERVICES
        for family in families(build_registry(service))
        for sample in family.samples
    }


# ---- the conventions, as a checker that returns what is wrong ------------------------------

NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
#: non-base units and abbreviations: Prometheus wants seconds, bytes, ratios
BAD_UNITS = re.compile(
    r"_(ms|us|ns|msec|millis|milliseconds|microseconds|nanoseconds|sec|secs|minutes?|hours?"
    r"|days?|kb|mb|gb|kib|mib|gib|kilobytes|megabytes|gigabytes|bits|percent|pct|fraction)"
    r"(_|$)"
)
RATIO_WORDS = re.compile(r"accuracy|fraction|ratio|\(0-1\)|share of", re.IGNORECASE)
RATE_WORDS = re.compile(r"bandwidth|throughput|bytes/s|per second", re.IGNORECASE)
STANDARD_PREFIXES = ("process_", "python_")


def convention_problems(registry: CollectorRegistry) -> list[str]:
    problems = []
    for family in families(registry):
        name, kind, text = family.name, family.type, family.documentation
        own = name.startswith("powertrip_")
        if not NAME.match(name):
            problems.append(f"{name}: not snake_case")
        if not own and not name.startswith(STANDARD_PREFIXES):
            problems.append(f"{name}: neither powertrip_ nor a standard process_/python_ name")
        if not text.strip():
            problems.append(f"{name}: no help text")
        for sample in family.samples:
            for label in sample.labels:
                if not NAME.match(label) or label.startswith("__"):
                    problems.append(f"{name}: label {label!r} is not a plain snake_case name")
        if kind == "counter":
            names = {s.name for s in family.samples if not s.name.endswith("_created")}
            if names and names != {f"{name}_total"}:
                problems.append(f"{name}: counter samples {sorted(names)} do not end in _total")
        elif name.endswith("_total"):
            problems.append(f"{name}: a {kind} must not end in _total (counters only)")
        if not own:
            continue
        if BAD_UNITS.search(name):
            problems.append(f"{name}: use a base unit suffix (_seconds, _bytes, _ratio)")
        if kind == "gauge" and RATIO_WORDS.search(f"{name} {text}"):
            if not name.endswith("_ratio"):
                problems.append(f"{name}: a 0-1 value must end in _ratio")
        if RATE_WORDS.search(f"{name} {text}") and not name.endswith("_per_second"):
            problems.append(f"{name}: a rate must end in _<unit>_per_second")
        if name.endswith("_per_second") and kind != "gauge":
            problems.append(f"{name}: a _per_second value is a gauge; count totals instead")
        if kind == "histogram" and not name.endswith(("_seconds", "_bytes")):
            problems.append(f"{name}: a histogram needs its unit as the suffix")
    return problems


# ---- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("service", SERVICES)
def test_registry_follows_the_naming_conventions(service):
    assert convention_problems(build_registry(service)) == []


def test_the_convention_checker_catches_the_old_names():
    """The names #18 complained about are flagged, so the check above is not vacuous."""
    registry = CollectorRegistry()
    Gauge("powertrip_site_link_bandwidth_bytes", "Link bandwidth in bytes/s", registry=registry)
    Gauge("powertrip_global_accuracy", "Held-out accuracy", registry=registry)
    Gauge("powertrip_site_power_fraction", "Power fraction of a site", registry=registry)
    Gauge("powertrip_things_total", "A gauge with a counter's name", registry=registry)
    Gauge("powertrip_wait_ms", "Milliseconds", registry=registry)
    text = "\n".join(convention_problems(registry))
    for name in (
        "powertrip_site_link_bandwidth_bytes: a rate",
        "powertrip_global_accuracy: a 0-1 value",
        "powertrip_site_power_fraction: use a base unit",
        "powertrip_things_total: a gauge must not end in _total",
        "powertrip_wait_ms: use a base unit",
    ):
        assert name in text, text


def test_one_meaning_per_name_across_services():
    """A name two services register has the same type and help in both (the old
    powertrip_selected_sites meant 'the aggregator's k' in one and 'the policy's last answer,
    by policy' in the other)."""
    seen: dict[str, tuple[str, str, str]] = {}
    clashes = []
    for service in SERVICES:
        for family in families(build_registry(service)):
            meaning = (family.type, family.documentation)
            if family.name in seen and seen[family.name][1:] != meaning:
                clashes.append(f"{family.name}: {seen[family.name]} vs {(service, *meaning)}")
            seen.setdefault(family.name, (service, *meaning))
    assert clashes == []
    own = {service: {f.name for f in families(build_registry(service))} for service in SERVICES}
    assert "powertrip_selected_sites" in own["aggregator"]
    assert "powertrip_policy_selected_sites" in own["policy"]
    assert "powertrip_selected_sites" not in own["policy"]


@pytest.mark.parametrize("service", SERVICES)
def test_standard_process_python_and_build_info_metrics(service):
    registry = build_registry(service)
    names = {s.name for f in families(registry) for s in f.samples}
    for name in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
        "python_info",
        "python_gc_objects_collected_total",
    ):
        assert name in names, f"{service}: {name} missing"
    versions = build_versions()
    assert set(versions) == {"version", "python", "grpc"}
    assert versions["version"] == powertrip.__version__
    assert registry.get_sample_value(BUILD_INFO, versions) == 1


@pytest.mark.skipif(promtool() is None, reason="promtool not installed (.ci/run installs it)")
@pytest.mark.parametrize("service", SERVICES)
def test_promtool_check_metrics_has_no_warnings(service):
    text = generate_latest(build_registry(service))
    assert b"powertrip_build_info" in text
    done = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, timeout=60
    )
    output = (done.stdout + done.stderr).decode()
    assert done.returncode == 0 and not output.strip(), output
