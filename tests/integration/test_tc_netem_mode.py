"""tc/ shaping's netem mode: the plumbing (htb child, ifb, ingress redirect) on a stand-in
tc in two network namespaces (tc_netns.py), the fallback to htb, and the plan (no root)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.integration.tc_netns import (
    _SKIP,
    AGG_IP,
    ECHO_PORT,
    PY,
    REPO,
    _sh,
    _shaping_module,
)

# --------------------------------------------------------------------------- netem mode plumbing

FAKE_TC = r"""#!/usr/bin/env bash
# Stand-in for tc on a kernel without netem: "netem delay D ..." becomes "pfifo ...", so
# the netem-mode plumbing (htb child, ifb, ingress redirect) runs on real qdiscs.
args=(); drop=0
for a in "$@"; do
  if [[ $drop -gt 0 ]]; then drop=$((drop-1)); continue; fi
  case "$a" in
    netem) args+=(pfifo) ;;
    delay) drop=1 ;;
    *) args+=("$a") ;;
  esac
done
exec REAL_TC "${args[@]}"
"""


def _api_in_site(site, code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    prog = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from powertrip import linkshaping as shaping\n"
        f"IFACE, STATE = {site.veth_site!r}, {str(site.state_dir)!r}\n" + code
    )
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(
        ["ip", "netns", "exec", site.site, PY, "-c", prog],
        capture_output=True,
        text=True,
        timeout=60,
        env=full_env,
    )


@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_auto_falls_back_to_htb_when_kernel_refuses_netem(site):
    if _shaping_module().has_netem():
        pytest.skip("this kernel has netem")
    proc = _api_in_site(
        site,
        (
            "shaping.detect._NETEM_CACHE = (True, 'detection fooled on purpose')\n"
            "print(shaping.apply(IFACE, 20, 100, 'auto', '127.0.0.1:7006', "
            f"'{AGG_IP}:{ECHO_PORT}', STATE))\n"
        ),
    )
    assert proc.returncode == 0, proc.stderr
    assert "(mode htb)" in proc.stdout and "userspace relay" in proc.stdout, proc.stdout
    assert site.state()["mode"] == "htb"
    rtt = site.tool_in_site("rtt", "127.0.0.1", "7006", "10")
    assert abs(rtt["median_ms"] - 40) <= 0.15 * 40 + 2, rtt


@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_netem_mode_plumbing_with_ifb_and_clear(site):
    bindir = site.tmp / "fake-tc-bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "tc"
    fake.write_text(FAKE_TC.replace("REAL_TC", shutil.which("tc")))
    fake.chmod(0o755)
    env = {"PATH": f"{bindir}:{os.environ.get('PATH', '')}"}
    proc = _api_in_site(
        site,
        (
            "shaping.detect._NETEM_CACHE = (True, 'pretend')\n"
            "print(shaping.apply(IFACE, 20, 100, 'auto', state_dir=STATE))\n"
        ),
        env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "(mode netem)" in proc.stdout and "on ingress (ifb" in proc.stdout, proc.stdout
    ifb = site.state()["ifb"]
    qd = site.qdiscs()
    assert "qdisc htb 1: root" in qd and "qdisc pfifo 10: parent 1:1" in qd, qd
    assert "qdisc ingress ffff:" in qd, qd
    assert "pfifo" in site.in_site("tc", "qdisc", "show", "dev", ifb).stdout
    filt = site.in_site("tc", "filter", "show", "dev", site.veth_site, "ingress").stdout
    assert f"Redirect to device {ifb}" in filt, filt
    # Traffic still flows both ways through the ingress redirect.
    r = site.tool_in_site("concurrent", AGG_IP, str(ECHO_PORT), "4", "65536")
    assert r["ok"] == 4, r
    out = site.clear().stdout
    assert f"removed ifb {ifb}" in out and "removed ingress qdisc" in out, out
    assert _sh("ip", "-n", site.site, "link", "show", ifb, check=False).returncode != 0
    assert "ingress" not in site.qdiscs()


@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_netem_mode_without_ifb_puts_the_whole_rtt_on_egress(site):
    bindir = site.tmp / "fake-tc-ip-bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "tc").write_text(FAKE_TC.replace("REAL_TC", shutil.which("tc")))
    (bindir / "ip").write_text(
        "#!/usr/bin/env bash\n"
        'for a in "$@"; do [[ $a == ifb ]] && { echo "Error: Unknown device type." >&2; '
        "exit 2; }; done\n"
        f'exec {shutil.which("ip")} "$@"\n'
    )
    for f in bindir.iterdir():
        f.chmod(0o755)
    env = {"PATH": f"{bindir}:{os.environ.get('PATH', '')}"}
    proc = _api_in_site(
        site,
        (
            "shaping.detect._NETEM_CACHE = (True, 'pretend')\n"
            "print(shaping.apply(IFACE, 20, 100, 'netem', state_dir=STATE))\n"
        ),
        env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "(mode netem)" in proc.stdout and "applied as 40 ms on egress" in proc.stdout, (
        proc.stdout
    )
    assert site.state()["ifb"] is None
    assert "ingress" not in site.qdiscs()


# --------------------------------------------------------------------------- plan (no root)


@pytest.mark.skipif(shutil.which("tc") is None, reason="needs the 'tc' command (iproute2)")
def test_netem_plan_delays_both_directions(monkeypatch):
    shaping = _shaping_module()
    monkeypatch.setattr(shaping.detect, "_NETEM_CACHE", (True, "pretend"))
    p = shaping.plan("lo", 40, 100, "auto")
    cmds = [" ".join(c[1:]) for c in p.commands]
    assert p.mode == "netem"
    assert "rate 100mbit" in cmds[1]
    assert any("parent 1:1" in c and "netem delay 40ms" in c for c in cmds), cmds
    if p.ifb:
        assert any(c.startswith(f"qdisc add dev {p.ifb} root netem delay 40ms") for c in cmds)
        assert any("mirred egress redirect dev " + p.ifb in c for c in cmds), cmds
    assert "mode netem" in p.description and "RTT +80 ms" in p.description

    monkeypatch.setattr(shaping.detect, "_NETEM_CACHE", (False, "pretend"))
    p = shaping.plan("lo", 40, 100, "auto", "127.0.0.1:7000", "10.0.0.1:50051")
    assert p.mode == "htb" and p.relay_delay_ms == 40
    assert not any("netem" in c for c in p.commands)
    assert "userspace relay 127.0.0.1:7000->10.0.0.1:50051" in p.description
    with pytest.raises(shaping.ShapingError, match="no netem"):
        shaping.plan("lo", 40, 100, "netem")
