#!/usr/bin/env python3
"""A delaying TCP relay: the latency stage of PowerTrip's link emulation.

Kernels without ``netem`` (like the ones PowerTrip's CI runs on) have no qdisc that
can hold packets for a while, so latency is added in userspace instead.  This relay
listens on a local address and forwards every connection to a target.  Every chunk of
bytes is held for ``--delay-ms`` milliseconds in *each* direction before it is
written on, so ``--delay-ms`` is a one-way delay and the round-trip time of traffic
through the relay grows by twice that.

Throughput is preserved: each direction has a reader that timestamps chunks into a
queue as soon as they arrive and an independent writer that releases each chunk when
its deadline passes (a pipeline, not sleep-per-chunk), so a bulk transfer keeps
``rate x delay`` bytes in flight inside the relay.  A per-direction byte budget
(``--max-buffer-bytes``) stops reading when it is full, which pushes back on the
sender through TCP flow control.

Half-close is forwarded (EOF in one direction reaches the other side after the same
delay, while the other direction keeps flowing), many connections are served
concurrently, and SIGTERM/SIGINT stop the relay cleanly (listeners closed, open
connections closed, pidfile removed, exit status 0).

What it does not emulate: the TCP handshake to the target is not delayed (only the
bytes are), and packets are not lost or reordered.

Standard library only; Python >= 3.10.  It imports nothing from its package because
:mod:`.relay` starts it by path (``python .../delay_relay.py``), and ``delay_relay.py`` in
a process's command line is how a relay is told from a recycled pid.

    delay_relay.py --listen 127.0.0.1:7000 --target 10.0.0.1:50051 --delay-ms 40
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import signal
import socket
import sys
import time

CHUNK = 1024 * 1024
STREAM_LIMIT = 1024 * 1024  # StreamReader buffer: bigger reads, fewer wake-ups
DEFAULT_MAX_BUFFER = 32 * 1024 * 1024


def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6HOST]:PORT`` -> (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"bad address {text!r}: expected [HOST]:PORT")
    else:
        host, sep, port = text.rpartition(":")
        if not sep or not host:
            raise ValueError(f"bad address {text!r}: expected HOST:PORT")
    try:
        port_num = int(port)
    except ValueError:
        raise ValueError(f"bad port in {text!r}") from None
    if not 0 < port_num < 65536:
        raise ValueError(f"port out of range in {text!r}")
    return host, port_num


def log(msg: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(f"{stamp} delay_relay[{os.getpid()}]: {msg}", file=sys.stderr, flush=True)


class Direction:
    """One direction of one connection: reader -> timestamped queue -> writer."""

    def __init__(self, name, reader, writer, delay_s, max_buffer):
        self.name = name
        self.reader = reader
        self.writer = writer
        self.delay_s = delay_s
        self.max_buffer = max_buffer
        self.queue: collections.deque = collections.deque()
        self.buffered = 0
        self.item_ready = asyncio.Event()
        self.space = asyncio.Event()
        self.space.set()
        self.bytes = 0

    async def read_loop(self):
        loop = asyncio.get_running_loop()
        while True:
            data = await self.reader.read(CHUNK)
            deadline = loop.time() + self.delay_s
            self.queue.append((deadline, data))
            self.item_ready.set()
            if not data:  # EOF: forwarded as a half-close after the delay
                return
            self.buffered += len(data)
            while self.buffered >= self.max_buffer:
                self.space.clear()
                await self.space.wait()

    async def write_loop(self):
        loop = asyncio.get_running_loop()
        while True:
            while not self.queue:
                self.item_ready.clear()
                await self.item_ready.wait()
            deadline, data = self.queue[0]
            wait = deadline - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            # Release everything that is due now in one write.
            now = loop.time()
            parts = []
            eof = False
            while self.queue and self.queue[0][0] <= now:
                _, item = self.queue.popleft()
                if not item:
                    eof = True
                    break
                parts.append(item)
            if parts:
                blob = b"".join(parts)
                self.writer.write(blob)
                self.bytes += len(blob)
                self.buffered -= len(blob)
                if self.buffered < self.max_buffer:
                    self.space.set()
                await self.writer.drain()
            if eof:
                if self.writer.can_write_eof():
                    self.writer.write_eof()
                return


class Relay:
    def __init__(self, pairs, delay_ms, max_buffer, connect_timeout, verbose):
        self.pairs = pairs
        self.delay_s = delay_ms / 1000.0
        self.max_buffer = max_buffer
        self.connect_timeout = connect_timeout
        self.verbose = verbose
        self.servers = []
        self.tasks: set[asyncio.Task] = set()
        self.active = 0
        self.total = 0

    async def start(self):
        for listen, target in self.pairs:
            host, port = listen

            async def handler(reader, writer, target=target):
                await self.handle(reader, writer, target)

            server = await asyncio.start_server(
                handler, host, port, reuse_address=True, backlog=1024, limit=STREAM_LIMIT
            )
            self.servers.append(server)

    async def handle(self, client_reader, client_writer, target):
        task = asyncio.current_task()
        self.tasks.add(task)
        self.active += 1
        self.total += 1
        peer = client_writer.get_extra_info("peername")
        up = down = None
        target_writer = None
        try:
            try:
                target_reader, target_writer = await asyncio.wait_for(
                    asyncio.open_connection(*target, limit=STREAM_LIMIT), self.connect_timeout
                )
            except (TimeoutError, OSError) as exc:
                log(f"connect to {target[0]}:{target[1]} for {peer} failed: {exc!r}")
                return
            for w in (client_writer, target_writer):
                sock = w.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            up = Direction("up", client_reader, target_writer, self.delay_s, self.max_buffer)
            down = Direction("down", target_reader, client_writer, self.delay_s, self.max_buffer)
            jobs = [
                asyncio.ensure_future(coro)
                for coro in (up.read_loop(), up.write_loop(), down.read_loop(), down.write_loop())
            ]
            try:
                # Run until both directions have delivered their EOF, or any side fails.
                done, pending = await asyncio.wait(jobs, return_when=asyncio.FIRST_EXCEPTION)
                for job in done:
                    exc = job.exception()
                    if exc is not None and self.verbose:
                        log(f"connection {peer}: {exc!r}")
            finally:
                for job in jobs:
                    job.cancel()
                await asyncio.gather(*jobs, return_exceptions=True)
        except asyncio.CancelledError:
            pass
        finally:
            for w in (client_writer, target_writer):
                if w is not None:
                    w.close()
            self.active -= 1
            self.tasks.discard(task)
            if self.verbose:
                sent = (up.bytes if up else 0, down.bytes if down else 0)
                log(f"connection {peer} closed (up {sent[0]} B, down {sent[1]} B)")

    async def close(self):
        for server in self.servers:
            server.close()
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in self.servers:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 2.0)


def write_pidfile(path: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(f"{os.getpid()}\n")
    os.replace(tmp, path)


def remove_pidfile(path: str) -> None:
    with contextlib.suppress(OSError):
        with open(path) as fh:
            if fh.read().strip() != str(os.getpid()):
                return
        os.unlink(path)


async def run(args) -> int:
    pairs = list(zip(args.listen, args.target, strict=True))
    relay = Relay(pairs, args.delay_ms, args.max_buffer_bytes, args.connect_timeout, args.verbose)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await relay.start()
    except OSError as exc:
        log(f"cannot listen: {exc}")
        return 1
    for (lh, lp), (th, tp) in pairs:
        log(f"listening on {lh}:{lp} -> {th}:{tp}, one-way delay {args.delay_ms:g} ms")
    if args.pidfile:
        write_pidfile(args.pidfile)
    try:
        await stop.wait()
    finally:
        log(f"stopping ({relay.active} open connections, {relay.total} served)")
        await relay.close()
        if args.pidfile:
            remove_pidfile(args.pidfile)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="TCP relay that delays every byte by --delay-ms in each direction "
        "(one-way delay; RTT through the relay grows by 2 x delay)."
    )
    p.add_argument(
        "--listen",
        action="append",
        required=True,
        type=parse_endpoint,
        help="HOST:PORT to listen on (repeat for several relays, paired with --target)",
    )
    p.add_argument(
        "--target",
        action="append",
        required=True,
        type=parse_endpoint,
        help="HOST:PORT to forward to",
    )
    p.add_argument(
        "--delay-ms",
        type=float,
        required=True,
        help="one-way delay added in each direction, milliseconds",
    )
    p.add_argument(
        "--max-buffer-bytes",
        type=int,
        default=DEFAULT_MAX_BUFFER,
        help="bytes held per direction per connection before reading pauses "
        "(must exceed rate x delay to keep full throughput)",
    )
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        help="seconds to wait for the target to accept",
    )
    p.add_argument("--pidfile", help="written once listening; removed on exit")
    p.add_argument("-v", "--verbose", action="store_true", help="log every connection")
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if len(args.listen) != len(args.target):
        parser.error("--listen and --target must be given the same number of times")
    if not (args.delay_ms >= 0 and args.delay_ms < 3_600_000):
        parser.error("--delay-ms must be >= 0")
    if args.max_buffer_bytes < CHUNK:
        parser.error(f"--max-buffer-bytes must be at least {CHUNK}")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
