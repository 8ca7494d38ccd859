"""The node-side helper that measures a site profile (powertrip/app/flower/measure.py):
latency to a local TCP server, bandwidth from a local HTTP server, power from a stand-in
NVML module (the real one needs a GPU), and the errors that say what is missing."""

from __future__ import annotations

import http.server
import sys
import threading
import types

import pytest

pytest.importorskip("flwr", reason="Flower is not installed: pip install -e '.[flower]'")

from powertrip.app.flower import miles_from_latency  # noqa: E402
from powertrip.app.flower.measure import (  # noqa: E402
    gpu_power_fraction,
    link_bandwidth_bytes_per_s,
    link_latency_s,
    measure_profile,
    split_endpoint,
)

BODY = b"x" * (2 * 2**20)


class _Body(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Body)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def fake_nvml(enforced_mw: list[float], max_mw: list[float]) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: len(enforced_mw)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetEnforcedPowerLimit = lambda h: enforced_mw[h]
    nvml.nvmlDeviceGetPowerManagementLimitConstraints = lambda h: (100_000, max_mw[h])
    return nvml


def test_latency_and_bandwidth_of_a_local_endpoint(http_server):
    latency = link_latency_s(http_server, probes=3)
    assert 0 < latency < 0.5
    bandwidth = link_bandwidth_bytes_per_s(f"http://{http_server}/probe", max_bytes=len(BODY))
    assert bandwidth > 1e6  # loopback: far faster than a megabyte a second
    assert split_endpoint("[::1]:443") == ("::1", 443)
    with pytest.raises(ValueError, match="is not host:port"):
        split_endpoint("aggregator.example.org")


def test_gpu_power_is_the_enforced_cap_over_the_largest_allowed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([150_000, 300_000], [300_000, 300_000]))
    fraction, why = gpu_power_fraction()
    assert fraction == pytest.approx(0.75) and why == ""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    fraction, why = gpu_power_fraction()
    assert fraction is None and "gpu" in why


def test_measure_profile_measures_what_it_can_and_names_what_it_cannot(http_server, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([200_000], [400_000]))
    profile = measure_profile(http_server, bandwidth_url=f"http://{http_server}/", max_bytes=2**20)
    assert profile.power_fraction == pytest.approx(0.5) and profile.site_id == ""
    assert profile.latency_s > 0 and profile.bandwidth_bytes_per_s > 0
    assert profile.distance_miles == pytest.approx(miles_from_latency(profile.latency_s))
    with pytest.raises(ValueError, match="give bandwidth_url"):
        measure_profile(http_server)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(ValueError, match="no power_fraction given and none measured"):
        measure_profile(http_server, bandwidth_bytes_per_s=1e8)
    given = measure_profile(http_server, power_fraction=0.3, bandwidth_bytes_per_s=1e8)
    assert (given.power_fraction, given.bandwidth_bytes_per_s) == (0.3, 1e8)
