"""tc/clear and tc/show, and shaping an already shaped link again, between two network
namespaces (tc_netns.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.tc_netns import _SKIP, AGG_IP, ECHO_PORT, SINK_PORT, TC

# --------------------------------------------------------------------------- clear / show


@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_clear_removes_shaping_and_stops_relay(site):
    site.shape(
        "--delay-ms",
        "10",
        "--rate-mbit",
        "20",
        "--relay-listen",
        "127.0.0.1:7004",
        "--relay-target",
        f"{AGG_IP}:{ECHO_PORT}",
    )
    pid = site.state()["relay"]["pid"]
    assert Path(f"/proc/{pid}").exists()
    show = site.in_site(str(TC / "show"), site.veth_site, "--state-dir", str(site.state_dir))
    assert "shaped" in show.stdout and f"relay pid {pid} running" in show.stdout, show.stdout
    assert "rate 20Mbit" in show.stdout, show.stdout

    out = site.clear().stdout
    assert out.startswith(f"cleared {site.veth_site}:") and f"stopped relay pid {pid}" in out
    assert "htb" not in site.qdiscs()
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert not list(site.state_dir.glob(f"{site.veth_site}@*.json"))
    show = site.in_site(str(TC / "show"), site.veth_site, "--state-dir", str(site.state_dir))
    assert "not shaped" in show.stdout, show.stdout
    # Unshaped veth is far faster than the 20 Mbit it was limited to.
    r = site.tool_in_site("send", AGG_IP, str(SINK_PORT), str(8 * 1024 * 1024))
    print(f"after clear: {r['mbit']:.0f} mbit")
    assert r["mbit"] > 100, r
    # Clearing twice is fine.
    assert "nothing was shaped" in site.clear().stdout


@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_reshape_replaces_previous_shaping(site):
    site.shape(
        "--delay-ms",
        "5",
        "--rate-mbit",
        "30",
        "--relay-listen",
        "127.0.0.1:7005",
        "--relay-target",
        f"{AGG_IP}:{ECHO_PORT}",
    )
    old_pid = site.state()["relay"]["pid"]
    site.shape(
        "--delay-ms",
        "5",
        "--rate-mbit",
        "60",
        "--relay-listen",
        "127.0.0.1:7005",
        "--relay-target",
        f"{AGG_IP}:{ECHO_PORT}",
    )
    assert site.state()["relay"]["pid"] != old_pid
    assert not Path(f"/proc/{old_pid}").exists() or "Z" in Path(f"/proc/{old_pid}/stat").read_text()
    classes = site.in_site("tc", "class", "show", "dev", site.veth_site).stdout
    assert "rate 60Mbit" in classes and "30Mbit" not in classes, classes
