"""The two network namespaces the tc/ shaping tests measure real traffic in
(test_tc_shaping_rates.py, test_tc_relay.py, test_tc_clear.py, test_tc_bad_input.py,
test_tc_netem_mode.py; their fixtures `net` and `site` are in conftest.py).

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
from pathlib import Path

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


def _shaping_module():
    return importlib.import_module("powertrip.linkshaping")


def _within(measured: float, target: float, tol: float = RATE_TOL) -> bool:
    return abs(measured - target) <= tol * target
