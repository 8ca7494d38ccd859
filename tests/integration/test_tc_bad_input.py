"""tc/shape on bad input, without CAP_NET_ADMIN, or with a relay that cannot listen: it fails
loudly and leaves no shaping behind (two network namespaces, tc_netns.py)."""

from __future__ import annotations

import shutil

import pytest

from tests.integration.tc_netns import _SKIP, AGG_IP, ECHO_PORT, SINK_PORT, TC, _shaping_module

# --------------------------------------------------------------------------- bad input


@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["nonexistent0", "--delay-ms", "10", "--rate-mbit", "50"], "does not exist"),
        (["IFACE", "--delay-ms", "10", "--rate-mbit", "0"], "rate must be a positive"),
        (["IFACE", "--delay-ms", "10", "--rate-mbit", "-5"], "rate must be a positive"),
        (["IFACE", "--delay-ms", "-1", "--rate-mbit", "50"], "delay must be >= 0"),
        (
            ["IFACE", "--delay-ms", "10", "--rate-mbit", "50", "--mode", "htb"],
            "needs the userspace relay",
        ),
        (
            ["IFACE", "--delay-ms", "1", "--rate-mbit", "5", "--relay-listen", "127.0.0.1:7"],
            "in pairs",
        ),
        (
            [
                "IFACE",
                "--delay-ms",
                "1",
                "--rate-mbit",
                "5",
                "--relay-listen",
                "nonsense",
                "--relay-target",
                f"{AGG_IP}:1",
            ],
            "bad relay address",
        ),
    ],
)
def test_bad_input_fails_loudly(site, args, reason):
    args = [site.veth_site if a == "IFACE" else a for a in args]
    proc = site.in_site(str(TC / "shape"), *args, "--state-dir", str(site.state_dir), check=False)
    print(proc.stderr.strip())
    assert proc.returncode != 0
    assert reason in proc.stderr, proc.stderr
    assert "htb" not in site.qdiscs()


@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_without_net_admin_fails_with_permission_error(site):
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv (util-linux) to drop CAP_NET_ADMIN")
    proc = site.in_site(
        "setpriv",
        "--bounding-set",
        "-net_admin",
        "--inh-caps",
        "-net_admin",
        str(TC / "shape"),
        site.veth_site,
        "--delay-ms",
        "0",
        "--rate-mbit",
        "10",
        "--state-dir",
        str(site.state_dir),
        check=False,
    )
    print(proc.stderr.strip())
    assert proc.returncode != 0
    assert "CAP_NET_ADMIN" in proc.stderr and "permission denied" in proc.stderr, proc.stderr
    assert "htb" not in site.qdiscs()


@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_relay_that_cannot_listen_rolls_back(site):
    # Port 5001 on 10.231.0.2 is the sink: listening there from the site netns fails
    # (address not local), so the relay cannot start -> error, and no htb is left behind.
    proc = site.shape(
        "--delay-ms",
        "10",
        "--rate-mbit",
        "50",
        "--relay-listen",
        f"{AGG_IP}:{SINK_PORT}",
        "--relay-target",
        f"{AGG_IP}:{ECHO_PORT}",
        check=False,
    )
    print(proc.stderr.strip())
    assert proc.returncode != 0
    assert "relay failed to start" in proc.stderr, proc.stderr
    assert "htb" not in site.qdiscs()


@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_mode_netem_without_netem_is_an_error(site):
    if _shaping_module().has_netem():
        pytest.skip("this kernel has netem")
    proc = site.shape("--delay-ms", "10", "--rate-mbit", "50", "--mode", "netem", check=False)
    assert proc.returncode != 0
    assert "no netem" in proc.stderr, proc.stderr
