"""tc/ shaping's delay through the userspace delaying relay, measured with real traffic
between two network namespaces (tc_netns.py): RTT, throughput, many connections, SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from tests.integration.tc_netns import (
    _SKIP,
    AGG_IP,
    ECHO_PORT,
    LINKSHAPING,
    PY,
    RATE_TOL,
    SINK_PORT,
    _within,
)

# --------------------------------------------------------------------------- delay


@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_relay_rtt_is_twice_the_one_way_delay(site):
    delay = 20.0
    out = site.shape(
        "--delay-ms",
        str(delay),
        "--rate-mbit",
        "100",
        "--relay-listen",
        "127.0.0.1:7000",
        "--relay-target",
        f"{AGG_IP}:{ECHO_PORT}",
    ).stdout
    assert out.count("\n") == 1 and out.startswith(f"shaped {site.veth_site} (mode "), out
    mode = site.state()["mode"]
    if mode == "htb":
        assert "userspace relay 127.0.0.1:7000->10.231.0.2:5002" in out, out
        assert "kernel has no netem" in out, out
    via_relay = site.tool_in_site("rtt", "127.0.0.1", "7000", "40")
    direct = site.tool_in_site("rtt", AGG_IP, str(ECHO_PORT), "20")
    print(
        f"one-way delay {delay} ms ({mode}): RTT via relay median {via_relay['median_ms']:.2f} "
        f"ms (min {via_relay['min_ms']:.2f}, max {via_relay['max_ms']:.2f}); "
        f"direct median {direct['median_ms']:.3f} ms"
    )
    expected = 2 * delay
    assert abs(via_relay["median_ms"] - expected) <= RATE_TOL * expected + 2, via_relay
    if mode == "htb":
        # Only traffic through the relay is delayed in htb mode.
        assert direct["median_ms"] < 2, direct


@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_relay_keeps_throughput_under_delay(site):
    rate, delay = 50, 20
    site.shape(
        "--delay-ms",
        str(delay),
        "--rate-mbit",
        str(rate),
        "--relay-listen",
        "127.0.0.1:7001",
        "--relay-target",
        f"{AGG_IP}:{SINK_PORT}",
    )
    nbytes = int(rate * 1e6 / 8 * 1.6)
    r = site.tool_in_site("send", "127.0.0.1", "7001", str(nbytes))
    print(
        f"rate {rate} mbit + one-way delay {delay} ms through the relay: "
        f"measured {r['mbit']:.1f} mbit"
    )
    assert r["bytes"] == nbytes
    assert _within(r["mbit"], rate), r


@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_relay_many_connections_with_half_close(site):
    site.shape(
        "--delay-ms",
        "10",
        "--rate-mbit",
        "200",
        "--relay-listen",
        "127.0.0.1:7002",
        "--relay-target",
        f"{AGG_IP}:{ECHO_PORT}",
    )
    r = site.tool_in_site("concurrent", "127.0.0.1", "7002", "32", str(256 * 1024))
    print(f"32 concurrent echo connections through the relay: {r}")
    assert r["ok"] == r["n"] == 32, r


@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_relay_exits_cleanly_on_sigterm(site):
    pidfile = site.tmp / "sigterm-relay.pid"
    proc = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            site.site,
            PY,
            str(LINKSHAPING / "delay_relay.py"),
            "--listen",
            "127.0.0.1:7003",
            "--target",
            f"{AGG_IP}:{ECHO_PORT}",
            "--delay-ms",
            "5",
            "--pidfile",
            str(pidfile),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    site.procs.append(proc)
    deadline = time.monotonic() + 10
    while not pidfile.exists() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.02)
    assert pidfile.exists()
    # An open connection in flight must not block shutdown.
    holder = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            site.site,
            PY,
            str(site.tool),
            "rtt",
            "127.0.0.1",
            "7003",
            "100000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    site.procs.append(holder)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=5) == 0, proc.stdout.read()
    assert not pidfile.exists()
    assert holder.wait(timeout=5) != 0  # its connection was closed
