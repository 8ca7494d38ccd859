"""A site worker that shapes its own link (containers: `--shape-link`, `cap_add: NET_ADMIN`).

At start, before it registers with the aggregator, the worker
1. claims a site from the profiler and gets that site's (scaled) latency and bandwidth,
2. shapes its default-route interface with `tc/` to that profile: htb for the rate and,
   where the kernel has no netem, the userspace delay relay on its path to the aggregator
   (the worker then dials the aggregator through the relay's local address),
3. serves the link-probe echo behind the same shaped path and asks the profiler to measure
   RTT and throughput through it.
Any failure raises LinkError with the reason: a worker asked to shape never runs unshaped.
"""

from __future__ import annotations

import logging
import math
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field

import grpc

from powertrip import linkshaping as shaping
from powertrip.linkshaping.probe import ProbeError, ProbeProcess
from powertrip.rpc.channels import open_channel
from powertrip.v1 import profiler_pb2, profiler_pb2_grpc

log = logging.getLogger("site_worker")

RELAY_PORT = 50070  # local end of the delayed path to the aggregator
PROBE_PORT = 50061  # public end of the delayed path to the probe echo


class LinkError(Exception):
    """The worker's link cannot be set up as its profile says; the message says why."""


@dataclass
class LinkSetup:
    site_id: str
    iface: str
    aggregator: str  # where the worker dials the aggregator now (through the shaping)
    description: str  # tc/shape's line: mode and what was applied
    latency_s: float
    bandwidth_bytes_per_s: float
    measured_latency_s: float = 0.0
    measured_bandwidth_bytes_per_s: float = 0.0
    probe: ProbeProcess | None = field(default=None, repr=False)

    def close(self, state_dir=None) -> None:
        """Stop the probe and remove the shaping (the relay with it)."""
        if self.probe:
            self.probe.close()
        try:
            shaping.clear(self.iface, state_dir)
        except shaping.ShapingError as exc:
            log.warning("could not clear shaping of %s: %s", self.iface, exc)


def default_iface() -> str:
    """The interface of the default route (used when the aggregator's route is unknown)."""
    ip = shutil.which("ip")
    if not ip:
        raise LinkError("`ip` (iproute2) is not installed; cannot find the interface to shape")
    out = subprocess.run([ip, "route", "show", "default"], capture_output=True, text=True)
    words = out.stdout.split()
    if "dev" not in words:
        raise LinkError("no default route: cannot tell which interface to shape (--link-iface)")
    return words[words.index("dev") + 1]


def route_iface(address: str, resolve_timeout_s: float = 120.0) -> str:
    """The interface traffic to `address` (host:port) leaves by.  Not always the default
    route's: a Docker Swarm task reaches the aggregator over its overlay network (eth0) while
    its default route goes out by docker_gwbridge (eth1), so shaping the default interface
    would leave the aggregator's path unshaped.  The name may not resolve yet (a swarm
    starts every service at once): wait for it up to `resolve_timeout_s`, then LinkError.
    Falls back to the default route's interface when `ip route get` names none (loopback)."""
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    deadline = time.monotonic() + resolve_timeout_s
    while True:
        try:
            target = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
            break
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise LinkError(
                    f"{host} does not resolve ({exc}): cannot tell which interface leads to "
                    "the aggregator (--link-iface names it)"
                ) from exc
            time.sleep(1.0)
    ip = shutil.which("ip")
    if ip:
        out = subprocess.run([ip, "route", "get", target], capture_output=True, text=True)
        words = out.stdout.split()
        if "dev" in words and words[words.index("dev") + 1] != "lo":
            return words[words.index("dev") + 1]
    return default_iface()


def iface_address(iface: str) -> str:
    """First IPv4 address of `iface`: where the profiler reaches this worker's probe."""
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", iface], capture_output=True, text=True
    )
    words = out.stdout.split()
    if "inet" not in words:
        raise LinkError(f"interface {iface} has no IPv4 address for the profiler to probe")
    return words[words.index("inet") + 1].split("/")[0]


def shaping_arguments(latency_s: float, bandwidth_bytes_per_s: float) -> tuple[float, float]:
    """(one-way delay ms, rate Mbit/s) for tc/shape; LinkError for a profile tc cannot apply."""
    if not (math.isfinite(latency_s) and latency_s >= 0):
        raise LinkError(f"profile latency_s={latency_s!r} cannot be shaped (must be >= 0)")
    if not (math.isfinite(bandwidth_bytes_per_s) and bandwidth_bytes_per_s > 0):
        raise LinkError(
            f"profile bandwidth_bytes_per_s={bandwidth_bytes_per_s!r} cannot be shaped "
            "(must be > 0)"
        )
    return latency_s * 1e3, bandwidth_bytes_per_s * 8 / 1e6


def _claim(stub, profiler: str, worker_id: str, site_id: str, timeout_s: float):
    """ClaimSite: the site named, or the lowest free one; LinkError says why not."""
    try:
        claim = stub.ClaimSite(
            profiler_pb2.ClaimSiteRequest(worker_id=worker_id, site_id=site_id),
            timeout=timeout_s,
            wait_for_ready=True,
        )
    except grpc.RpcError as exc:
        raise LinkError(
            f"profiler {profiler}: cannot claim {site_id or 'a site'}: "
            f"{exc.code().name}: {exc.details()}"
        ) from exc
    return claim.site


def claim_site(
    profiler: str,
    worker_id: str,
    site_id: str = "",
    claim_timeout_s: float = 120.0,
    credentials: grpc.ChannelCredentials | None = None,
) -> str:
    """Claim a site from the profiler without shaping (`--claim-site`: a remote worker on a
    real wide-area link).  The profiler is the deployment's one claim book, so a remote
    worker and the local shaped ones never pick the same site; returns the site id."""
    channel = open_channel(profiler, credentials)
    try:
        profile = _claim(
            profiler_pb2_grpc.ProfilerStub(channel), profiler, worker_id, site_id, claim_timeout_s
        )
    finally:
        channel.close()
    log.info("claimed %s from the profiler %s (link not shaped)", profile.site_id, profiler)
    return profile.site_id


def setup_link(
    profiler: str,
    aggregator: str,
    worker_id: str,
    site_id: str = "",
    iface: str | None = None,
    state_dir=None,
    claim_timeout_s: float = 120.0,
    measure: bool = True,
    credentials: grpc.ChannelCredentials | None = None,
) -> LinkSetup:
    """Claim a site, shape this host's link to its profile, have the profiler measure it
    (`credentials`: the worker's mutual TLS, when the profiler serves TLS)."""
    channel = open_channel(profiler, credentials)
    stub = profiler_pb2_grpc.ProfilerStub(channel)
    try:
        profile = _claim(stub, profiler, worker_id, site_id, claim_timeout_s)
    except LinkError:
        channel.close()
        raise
    delay_ms, rate_mbit = shaping_arguments(profile.latency_s, profile.bandwidth_bytes_per_s)
    iface = iface or route_iface(aggregator)
    try:
        probe = ProbeProcess("127.0.0.1", 0)
    except ProbeError as exc:
        raise LinkError(str(exc)) from exc
    try:
        description = shaping.apply(
            iface,
            delay_ms,
            rate_mbit,
            relay_listen=[f"127.0.0.1:{RELAY_PORT}", f"0.0.0.0:{PROBE_PORT}"],
            relay_target=[aggregator, f"127.0.0.1:{probe.port}"],
            state_dir=state_dir,
        )
    except shaping.ShapingError as exc:
        probe.close()
        raise LinkError(
            f"cannot shape {iface} for {profile.site_id} "
            f"(one-way {delay_ms:.2f} ms, {rate_mbit:.3f} Mbit/s): {exc}"
        ) from exc
    log.info("%s: %s", profile.site_id, description)
    setup = LinkSetup(
        site_id=profile.site_id,
        iface=iface,
        aggregator=f"127.0.0.1:{RELAY_PORT}",
        description=description,
        latency_s=profile.latency_s,
        bandwidth_bytes_per_s=profile.bandwidth_bytes_per_s,
        probe=probe,
    )
    if not measure:
        channel.close()
        return setup
    address = f"{iface_address(iface)}:{PROBE_PORT}"
    try:
        reply = stub.MeasureLink(
            profiler_pb2.MeasureLinkRequest(
                site_id=profile.site_id, worker_id=worker_id, probe_address=address
            ),
            timeout=claim_timeout_s,
        )
    except grpc.RpcError as exc:
        setup.close(state_dir)
        raise LinkError(
            f"profiler {profiler} could not measure {profile.site_id} via {address}: "
            f"{exc.code().name}: {exc.details()}"
        ) from exc
    finally:
        channel.close()
    setup.measured_latency_s = reply.site.measured_latency_s
    setup.measured_bandwidth_bytes_per_s = reply.site.measured_bandwidth_bytes_per_s
    log.info(
        "%s: link one-way %.1f ms measured (%.1f configured), %.2f MB/s measured (%.2f configured)",
        setup.site_id,
        setup.measured_latency_s * 1e3,
        setup.latency_s * 1e3,
        setup.measured_bandwidth_bytes_per_s / 1e6,
        setup.bandwidth_bytes_per_s / 1e6,
    )
    return setup
