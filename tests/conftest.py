"""Shared fixtures: run services as real processes on loopback."""

from __future__ import annotations

import pytest

from powertrip.experiments.launcher import start_service


@pytest.fixture()
def service_factory(tmp_path):
    started = []

    def start(name: str, *args: str, **kwargs):
        service = start_service(name, list(args), tmp_path / "logs", **kwargs)
        started.append(service)
        return service

    yield start
    for service in reversed(started):
        service.stop()
