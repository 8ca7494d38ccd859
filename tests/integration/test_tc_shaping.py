"""tc/ link shaping, measured with real traffic between two network namespaces.

Topology (created per test module, deleted on teardown even on failure)::

    netns "site" (10.231.0.1, shaped)  <== veth ==>  netns "agg" (10.231.0.2)
                                                      sink  :5001 (reports received rate)
                                                      echo  :5002 (ping-pong / half-close)

All traffic stays inside these two namespaces.  Needs root and ``ip netns``.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TC = REPO / "tc"
LINKSHAPING = REPO / "powertrip" / "linkshaping"
PY = sys.executable
SITE_IP, AGG_IP = "10.231.0.1", "10.231.0.2"
SINK_PORT, ECHO_PORT = 5001, 5002
RATE_TOL = 0.15

NETTOOL = r"""
import json, os, socket, statistics, sys, threading, time

def accept_loop(server, handler):
    while True:
        conn, _ = server.accept()
        threading.Thread(target=handler, args=(conn,), daemon=True).start()

def handle_sink(conn):
    buf = bytearray(1 << 20)
    n = 0
    first = last = None
    first_k = 0
    while True:
        k = conn.recv_into(buf)
        if not k:
            break
        now = time.perf_counter()
        if first is None:
            first, first_k = now, k
        n += k
        last = now
    secs = (last - first) if first is not None else 0.0
    conn.sendall(json.dumps({"bytes": n, "first_chunk": first_k, "seconds": secs}).encode())
    conn.close()

def handle_echo(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        data = conn.recv(1 << 16)
        if not data:
            break
        conn.sendall(data)
    conn.shutdown(socket.SHUT_WR)
    conn.close()

def serve(host, sink_port, echo_port):
    for port, handler in ((sink_port, handle_sink), (echo_port, handle_echo)):
        server = socket.create_server((host, int(port)), backlog=256)
        threading.Thread(target=accept_loop, args=(server, handler), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()

def send(host, port, nbytes):
    nbytes = int(nbytes)
    chunk = memoryview(os.urandom(1 << 20))
    t0 = time.perf_counter()
    s = socket.create_connection((host, int(port)), timeout=60)
    left = nbytes
    while left:
        k = min(left, len(chunk))
        s.sendall(chunk[:k])
        left -= k
    s.shutdown(socket.SHUT_WR)
    reply = b""
    while True:
        data = s.recv(4096)
        if not data:
            break
        reply += data
    wall = time.perf_counter() - t0
    r = json.loads(reply)
    r["mbit"] = (r["bytes"] - r["first_chunk"]) * 8 / r["seconds"] / 1e6
    r["wall_mbit"] = nbytes * 8 / wall / 1e6
    print(json.dumps(r))

def recv_exact(s, n):
    got = b""
    while len(got) < n:
        data = s.recv(n - len(got))
        if not data:
            raise EOFError("connection closed")
        got += data
    return got

def rtt(host, port, count):
    s = socket.create_connection((host, int(port)), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = b"x" * 64
    for _ in range(3):
        s.sendall(msg); recv_exact(s, 64)
    samples = []
    for _ in range(int(count)):
        t0 = time.perf_counter()
        s.sendall(msg)
        recv_exact(s, 64)
        samples.append((time.perf_counter() - t0) * 1000)
    s.close()
    print(json.dumps({"median_ms": statistics.median(samples), "min_ms": min(samples),
                      "max_ms": max(samples), "n": len(samples)}))

def concurrent(host, port, conns, size):
    conns, size = int(conns), int(size)
    results = [None] * conns
    def one(i):
        payload = os.urandom(size)
        try:
            s = socket.create_connection((host, int(port)), timeout=30)
            def writer():
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)   # half-close: we still read the echo after this
            t = threading.Thread(target=writer)
            t.start()
            got = bytearray()
            while True:
                data = s.recv(1 << 16)
                if not data:
                    break
                got += data
            t.join()
            s.close()
            results[i] = bytes(got) == payload
        except Exception as exc:
            results[i] = repr(exc)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(conns)]
    for t in threads: t.start()
    for t in threads: t.join()
    print(json.dumps({"ok": sum(r is True for r in results), "n": conns,
                      "errors": [r for r in results if r is not True][:3],
                      "seconds": time.perf_counter() - t0}))

if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])
"""


# --------------------------------------------------------------------------- environment


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (creates network namespaces and applies tc qdiscs)"
    for tool in ("ip", "tc"):
        if not shutil.which(tool):
            return f"needs the '{tool}' command (iproute2)"
    probe = f"pt-tc-probe-{os.getpid()}"
    proc = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"'ip netns add' is unavailable here: {proc.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


_SKIP = _skip_reason()


def _sh(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} -> {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
        )
    return proc


class Net:
    def __init__(self, tmp: Path):
        tag = os.getpid()
        self.site = f"pt-tc-site-{tag}"
        self.agg = f"pt-tc-agg-{tag}"
        self.veth_site = f"ptts{tag}"[:15]
        self.veth_agg = f"ptta{tag}"[:15]
        self.tmp = tmp
        self.state_dir = tmp / "state"
        self.tool = tmp / "nettool.py"
        self.tool.write_text(NETTOOL)
        self.procs: list[subprocess.Popen] = []

    def setup(self) -> None:
        _sh("ip", "netns", "add", self.site)
        _sh("ip", "netns", "add", self.agg)
        _sh(
            "ip",
            "link",
            "add",
            self.veth_site,
            "netns",
            self.site,
            "type",
            "veth",
            "peer",
            "name",
            self.veth_agg,
            "netns",
            self.agg,
        )
        for ns, dev, addr in (
            (self.site, self.veth_site, SITE_IP),
            (self.agg, self.veth_agg, AGG_IP),
        ):
            _sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            _sh("ip", "-n", ns, "link", "set", dev, "up")
        server = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.agg,
                PY,
                str(self.tool),
                "serve",
                AGG_IP,
                str(SINK_PORT),
                str(ECHO_PORT),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.procs.append(server)
        line = server.stdout.readline().strip()
        assert line == "ready", f"test server did not start: {line!r}"

    def teardown(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        self.clear(check=False)
        # Anything still running in our own namespaces was started by this test.
        for ns in (self.site, self.agg):
            pids = _sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for ns in (self.site, self.agg):
            _sh("ip", "netns", "del", ns, check=False)

    def in_site(self, *cmd: str, check: bool = True, timeout: float = 60):
        return _sh("ip", "netns", "exec", self.site, *cmd, check=check, timeout=timeout)

    def tool_in_site(self, *args: str, timeout: float = 60) -> dict:
        proc = self.in_site(PY, str(self.tool), *args, timeout=timeout)
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def shape(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.in_site(
            str(TC / "shape"),
            self.veth_site,
            *args,
            "--state-dir",
            str(self.state_dir),
            check=check,
        )

    def clear(self, check: bool = True) -> subprocess.CompletedProcess:
        return self.in_site(
            str(TC / "clear"), self.veth_site, "--state-dir", str(self.state_dir), check=check
        )

    def qdiscs(self) -> str:
        return self.in_site("tc", "qdisc", "show", "dev", self.veth_site).stdout

    def state(self) -> dict:
        files = list(self.state_dir.glob(f"{self.veth_site}@*.json"))
        assert len(files) == 1, files
        return json.loads(files[0].read_text())


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    if _SKIP:
        pytest.skip(_SKIP)
    n = Net(tmp_path_factory.mktemp("tcshape"))
    try:
        n.setup()
        yield n
    finally:
        n.teardown()


@pytest.fixture()
def site(net):
    """The shaped side; shaping is cleared after every test."""
    yield net
    net.clear(check=False)


def _shaping_module():
    return importlib.import_module("powertrip.linkshaping")


def _within(measured: float, target: float, tol: float = RATE_TOL) -> bool:
    return abs(measured - target) <= tol * target


# --------------------------------------------------------------------------- rate


@pytest.mark.parametrize("rate", [50, 200])
@pytest.mark.netns
@pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
def test_rate_limit_measured_with_real_traffic(site, rate):
    out = site.shape("--delay-ms", "0", "--rate-mbit", str(rate)).stdout
    assert f"rate {rate} mbit via htb" in out, out
    assert "htb" in site.qdiscs()
    nbytes = int(rate * 1e6 / 8 * 1.6)  # ~1.6 s of traffic at the configured rate
    r = site.tool_in_site("send", AGG_IP, str(SINK_PORT), str(nbytes))
    print(
        f"rate {rate} mbit: measured {r['mbit']:.1f} mbit (receiver), "
        f"{r['wall_mbit']:.1f} mbit (sender wall clock), {nbytes / 1e6:.1f} MB"
    )
    assert r["bytes"] == nbytes
    assert _within(r["mbit"], rate), r


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
