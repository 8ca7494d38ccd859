"""Link probes: measure a site's RTT and throughput through its real (shaped) path.

A site worker serves `ProbeServer` behind its shaped link (the delay relay and the htb
qdisc of `tc/`); the profiler connects to it and measures with small probes, never with
model-sized transfers.  Plain TCP, not gRPC, so the figures carry no RPC overhead.

Wire format, client to server, one 8-byte header per request:
  byte 0  b"P": ping, the server echoes the 8 bytes back
          b"B": bulk, the server sends back `length` bytes (bytes 1..7, big endian)
Anything else closes the connection.  Nothing received is ever interpreted beyond that.
"""

from __future__ import annotations

import argparse
import os
import socket
import socketserver
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

HEADER = 8
MAX_BULK_BYTES = 64 * 1024 * 1024
MIN_BULK_BYTES = 256 * 1024
CHUNK = 64 * 1024
_ZEROS = bytes(CHUNK)


class ProbeError(Exception):
    """A probe could not be made; the message names the address and what failed."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        part = sock.recv(n - len(data))
        if not part:
            raise ConnectionError(f"connection closed after {len(data)} of {n} bytes")
        data += part
    return bytes(data)


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                header = _recv_exact(sock, HEADER)
                if header[:1] == b"P":
                    sock.sendall(header)
                elif header[:1] == b"B":
                    remaining = int.from_bytes(header[1:], "big")
                    if remaining > MAX_BULK_BYTES:
                        return
                    while remaining:
                        n = min(remaining, CHUNK)
                        sock.sendall(_ZEROS[:n])
                        remaining -= n
                else:
                    return
        except (ConnectionError, OSError):
            return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class ProbeServer:
    """Echo/bulk server on (host, port) in a daemon thread; port 0 picks a free one."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        try:
            self._server = _Server((host, port), _Handler)
        except OSError as exc:
            raise ProbeError(f"probe server cannot listen on {host}:{port}: {exc}") from exc
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="link-probe", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class ProbeProcess:
    """`ProbeServer` in its own process: a worker busy training (and holding its GIL)
    would otherwise add its own scheduling delays to every echo."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 30.0):
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "powertrip.linkshaping.probe",
                "--host",
                host,
                "--port",
                str(port),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        line = self._proc.stdout.readline()  # "probe listening on HOST:PORT"
        if not line.startswith("probe listening on "):
            self._proc.kill()
            err = self._proc.stderr.read().strip().splitlines()[-1:] if self._proc.stderr else ""
            raise ProbeError(f"probe server did not start on {host}:{port}: {err}")
        self.host = host
        self.port = int(line.rsplit(":", 1)[1])

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()


@dataclass(frozen=True)
class LinkMeasurement:
    rtt_s: float  # minimum RTT over the pings: propagation plus the path's fixed cost
    rtt_median_s: float
    bandwidth_bytes_per_s: float  # best of the bulk probes, over their last 3/4
    probe_bytes: int

    @property
    def latency_s(self) -> float:
        """One-way latency, as profiles carry it (symmetric path assumed)."""
        return self.rtt_s / 2


def probe_size(expected_bandwidth_bytes_per_s: float | None, seconds: float = 1.0) -> int:
    """Bulk probe size: about `seconds` of the expected rate, clamped to [256 KiB, 64 MiB]."""
    if not expected_bandwidth_bytes_per_s or expected_bandwidth_bytes_per_s <= 0:
        return 4 * 1024 * 1024
    size = int(expected_bandwidth_bytes_per_s * seconds)
    return max(MIN_BULK_BYTES, min(MAX_BULK_BYTES, size))


def throughput(nbytes_after_first: int, t_first: float, t_last: float) -> float:
    """Bytes/s over an interval of the transfer that starts after its first bytes."""
    if t_last <= t_first:
        raise ValueError("throughput needs t_last > t_first")
    return nbytes_after_first / (t_last - t_first)


def _parse(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ProbeError(f"probe address must be host:port, got {address!r}")
    return host.strip("[]"), int(port)


def measure(
    address: str,
    expected_bandwidth_bytes_per_s: float | None = None,
    pings: int = 20,
    bulk_probes: int = 2,
    timeout_s: float = 30.0,
) -> LinkMeasurement:
    """RTT (min of `pings` after one warm-up) and throughput (best of `bulk_probes`).

    Throughput is what the site can send (its egress is the shaped direction).
    """
    host, port = _parse(address)
    size = probe_size(expected_bandwidth_bytes_per_s)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            rtts = []
            for i in range(pings + 1):
                header = b"P" + i.to_bytes(7, "big")
                t0 = time.perf_counter()
                sock.sendall(header)
                if _recv_exact(sock, HEADER) != header:
                    raise ProbeError(f"probe {address}: ping echo does not match")
                if i:  # the first one also pays for the relay's connection to the site
                    rtts.append(time.perf_counter() - t0)
                    time.sleep(0.005)  # spread the pings: the minimum is the one that counts
            rates = []
            for _ in range(bulk_probes):
                sock.sendall(b"B" + size.to_bytes(7, "big"))
                # Time only the last three quarters: the first bytes ride the qdisc's burst
                # allowance and the RTT, and would read faster or slower than the link.
                mark_at, got, t_mark = size // 4, 0, None
                while got < size:
                    part = sock.recv(min(CHUNK, size - got))
                    if not part:
                        raise ProbeError(f"probe {address}: closed after {got} of {size} bytes")
                    got += len(part)
                    if t_mark is None and got >= mark_at:
                        t_mark, b_mark = time.perf_counter(), got
                rates.append(throughput(size - b_mark, t_mark, time.perf_counter()))
    except ProbeError:
        raise
    except (OSError, ConnectionError, ValueError) as exc:
        raise ProbeError(f"probe {address}: {exc}") from exc
    return LinkMeasurement(
        rtt_s=min(rtts),
        rtt_median_s=statistics.median(rtts),
        bandwidth_bytes_per_s=max(rates),
        probe_bytes=size,
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m powertrip.linkshaping.probe --host H --port P`: serve probes until killed."""
    parser = argparse.ArgumentParser(prog="python -m powertrip.linkshaping.probe")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        server = _Server((args.host, args.port), _Handler)
    except OSError as exc:
        print(f"probe server cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    print(f"probe listening on {args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
