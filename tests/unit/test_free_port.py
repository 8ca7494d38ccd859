"""`free_port` hands out a port that this process can bind at once (the run binds it for
the aggregator a moment later; a port still held by the probe socket would fail there)."""

from __future__ import annotations

import socket

from powertrip.app.experiments.launcher import free_port


def test_free_port_can_be_bound_again():
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # OSError (EADDRINUSE) if free_port kept it
        assert s.getsockname() == ("127.0.0.1", port)
