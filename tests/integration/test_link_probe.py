"""Link probes and the profiler's ClaimSite / MeasureLink, over real TCP and real gRPC.

The probes here run on loopback (unshaped); the shaped path is measured by
tests/e2e/test_compose.py (containers with tc) and the tc/ netns tests.
"""

from __future__ import annotations

import socket
import urllib.request

import grpc
import pytest

from powertrip.core.config import RunConfig
from powertrip.core.profiles import generate_population
from powertrip.linkshaping.probe import (
    MAX_BULK_BYTES,
    MIN_BULK_BYTES,
    ProbeError,
    ProbeProcess,
    ProbeServer,
    measure,
    probe_size,
    throughput,
)
from powertrip.rpc.channels import open_channel
from powertrip.v1 import profiler_pb2, profiler_pb2_grpc
from services.profiler.config import ProfilerConfig
from services.profiler.profile_book import Measured, combine
from services.site_worker.link import LinkError, shaping_arguments


def test_probe_size_and_throughput_math():
    assert probe_size(None) == 4 * 1024 * 1024
    assert probe_size(1.0) == MIN_BULK_BYTES
    assert probe_size(1e12) == MAX_BULK_BYTES
    assert probe_size(4e6, seconds=1.0) == 4_000_000
    assert throughput(1_000_000, 10.0, 10.5) == pytest.approx(2e6)
    with pytest.raises(ValueError):
        throughput(10, 1.0, 1.0)


def test_measure_loopback_probe_server():
    server = ProbeServer("127.0.0.1", 0)
    try:
        m = measure(f"127.0.0.1:{server.port}", expected_bandwidth_bytes_per_s=4e6, pings=5)
    finally:
        server.close()
    assert 0 < m.rtt_s <= m.rtt_median_s < 0.5
    assert m.latency_s == pytest.approx(m.rtt_s / 2)
    # loopback moves far more than 10 MB/s even on a loaded 2-core machine
    assert m.bandwidth_bytes_per_s > 10e6
    assert m.probe_bytes == 4_000_000


def test_measure_reports_an_unreachable_probe():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ProbeError, match=f"127.0.0.1:{port}"):
        measure(f"127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(ProbeError, match="host:port"):
        measure("no-port-here")


def test_link_estimate_is_min_rtt_and_median_throughput():
    samples = [
        Measured(0.0, 9e6, 0.030, 1),
        Measured(0.0, 14e6, 0.052, 2),
        Measured(0.0, 10e6, 0.041, 2),
    ]
    estimate = combine(samples)
    assert estimate.rtt_s == 0.030 and estimate.latency_s == 0.015
    assert estimate.bandwidth_bytes_per_s == 10e6 and estimate.probe_bytes == 2
    with pytest.raises(ValueError):
        combine([])


def test_probe_process_serves_until_closed():
    probe = ProbeProcess("127.0.0.1", 0)
    try:
        assert measure(f"127.0.0.1:{probe.port}", 4e6, pings=3).rtt_s < 0.5
    finally:
        probe.close()
    with pytest.raises(ProbeError):
        measure(f"127.0.0.1:{probe.port}", timeout_s=2)


def test_profiles_that_tc_cannot_apply_are_refused():
    assert shaping_arguments(0.012, 1.25e6) == pytest.approx((12.0, 10.0))
    with pytest.raises(LinkError, match="bandwidth_bytes_per_s=0"):
        shaping_arguments(0.01, 0.0)
    with pytest.raises(LinkError, match="latency_s=-1"):
        shaping_arguments(-1.0, 1e6)
    with pytest.raises(LinkError, match="nan"):
        shaping_arguments(float("nan"), 1e6)


@pytest.fixture()
def profiler(service_factory, tmp_path):
    config = RunConfig(workload="synthetic", num_sites=3, seed=5)
    path = tmp_path / "run.yaml"
    config.write_yaml(path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        metrics_port = s.getsockname()[1]
    service = service_factory(
        "profiler",
        "--config",
        str(path),
        "--bandwidth-scale",
        "0.01",
        "--latency-scale",
        "2",
        "--metrics-port",
        str(metrics_port),
    )
    return service, metrics_port


def test_claims_scale_and_measure_through_the_profiler(profiler):
    service, metrics_port = profiler
    with open_channel(service.target) as channel:
        stub = profiler_pb2_grpc.ProfilerStub(channel)
        unscaled = {
            s.site_id: s
            for s in stub.GetProfiles(profiler_pb2.GetProfilesRequest(), timeout=5).sites
        }
        claims = [
            stub.ClaimSite(profiler_pb2.ClaimSiteRequest(worker_id=f"w{i}"), timeout=5)
            for i in range(3)
        ]
        assert [c.site.site_id for c in claims] == ["site-000", "site-001", "site-002"]
        assert claims[0].bandwidth_scale == 0.01 and claims[0].latency_scale == 2
        # a restarted worker gets its own site back; a fourth worker gets a clear refusal
        again = stub.ClaimSite(profiler_pb2.ClaimSiteRequest(worker_id="w1"), timeout=5)
        assert again.site.site_id == "site-001"
        with pytest.raises(grpc.RpcError) as err:
            stub.ClaimSite(profiler_pb2.ClaimSiteRequest(worker_id="w9"), timeout=5)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "all 3 sites are claimed" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            stub.ClaimSite(
                profiler_pb2.ClaimSiteRequest(worker_id="w9", site_id="site-000"), timeout=5
            )
        assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS

        server = ProbeServer("127.0.0.1", 0)
        try:
            reply = stub.MeasureLink(
                profiler_pb2.MeasureLinkRequest(
                    site_id="site-001", worker_id="w1", probe_address=f"127.0.0.1:{server.port}"
                ),
                timeout=60,
            )
        finally:
            server.close()
        assert reply.rtt_s > 0 and reply.probe_bytes >= MIN_BULK_BYTES
        assert reply.site.measured_latency_s == pytest.approx(reply.rtt_s / 2)
        assert reply.site.measured_bandwidth_bytes_per_s > 10e6
        with pytest.raises(grpc.RpcError) as err:
            stub.MeasureLink(
                profiler_pb2.MeasureLinkRequest(site_id="site-002", probe_address="127.0.0.1:1"),
                timeout=30,
            )
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "127.0.0.1:1" in err.value.details()
        profiles = {
            s.site_id: s
            for s in stub.GetProfiles(profiler_pb2.GetProfilesRequest(), timeout=5).sites
        }
    assert profiles["site-001"].measured_bandwidth_bytes_per_s > 0
    assert profiles["site-002"].measured_bandwidth_bytes_per_s == 0
    # the scales are applied to what every client sees, the policy included
    paper = generate_population(
        ProfilerConfig.from_run_config(
            RunConfig(workload="synthetic", num_sites=3, seed=5)
        ).population
    )[1]
    for seen in (claims[1].site, unscaled["site-001"], profiles["site-001"]):
        assert seen.bandwidth_bytes_per_s == pytest.approx(paper.bandwidth_bytes_per_s * 0.01)
        assert seen.latency_s == pytest.approx(paper.latency_s * 2)
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    text = text.decode()
    bandwidth = "powertrip_site_link_bandwidth_bytes_per_second"
    assert f'{bandwidth}{{site="site-001",source="measured"}}' in text
    assert 'powertrip_site_link_latency_seconds{site="site-002",source="configured"}' in text
    assert 'powertrip_site_link_latency_seconds{site="site-002",source="measured"}' not in text


def test_bad_scale_is_refused(service_factory, tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "services.profiler", "--port", "0", "--bandwidth-scale", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "bandwidth_scale must be > 0" in done.stderr


def test_power_telemetry_degrades_cleanly_without_a_gpu(caplog):
    """No GPU here (nvidia-ml-py may be there: codecarbon brings it): no reader, one reason,
    no exception."""
    from services.site_worker.telemetry import (
        GpuPower,
        PowerReading,
        energy_delta,
        start_power_reporting,
    )

    reader, why = GpuPower.open()
    assert reader is None and why  # this machine has no GPU
    with caplog.at_level("INFO", logger="site_worker"):
        assert start_power_reporting("127.0.0.1:1", "site-000", "w") is None
    assert "no GPU power telemetry" in caplog.text
    # energy: the counter's difference when both readings have it, else power x time
    assert energy_delta(PowerReading(300, 1000.0), PowerReading(310, 1450.0), 5) == 450.0
    assert energy_delta(None, PowerReading(300, None), 5) == 1500.0


def test_profiler_reprobes_and_stops_when_the_site_goes(service_factory, tmp_path):
    import time

    config = RunConfig(workload="synthetic", num_sites=2, seed=5)
    path = tmp_path / "run.yaml"
    config.write_yaml(path)
    service = service_factory(
        "profiler", "--config", str(path), "--probe-interval-s", "0.5", "--log-level", "DEBUG"
    )
    server = ProbeServer("127.0.0.1", 0)
    with open_channel(service.target) as channel:
        stub = profiler_pb2_grpc.ProfilerStub(channel)
        stub.MeasureLink(
            profiler_pb2.MeasureLinkRequest(
                site_id="site-000", probe_address=f"127.0.0.1:{server.port}"
            ),
            timeout=60,
        )
        log = tmp_path / "logs" / "profiler.log"
        deadline = time.monotonic() + 60
        while "site-000 re-probed" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "site-000 re-probed" in log.read_text()
        server.close()  # the site's worker has gone
        while "no longer probed" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "site-000: probe failing" in log.read_text()
        # the last estimate stays published
        (site,) = stub.GetProfiles(
            profiler_pb2.GetProfilesRequest(site_ids=["site-000"]), timeout=5
        ).sites
        assert site.measured_latency_s > 0 and site.measured_bandwidth_bytes_per_s > 0
