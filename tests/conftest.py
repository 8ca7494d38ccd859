"""Shared fixtures: run services as real processes on loopback."""

from __future__ import annotations

from pathlib import Path

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


@pytest.fixture()
def stack_factory(service_factory):
    """start(config_path, out_dir, *aggregator_flags) -> (profiler, policy, aggregator): the
    profiler and policy, and an aggregator wired to them, each a real process."""

    def start(config_path: Path, out_dir: Path, *extra: str):
        profiler = service_factory("profiler", "--config", str(config_path))
        policy = service_factory("policy")
        aggregator = service_factory(
            "aggregator", "--config", str(config_path), "--out", str(out_dir),
            "--profiler", profiler.target, "--policy", policy.target, *extra,
        )  # fmt: skip
        return profiler, policy, aggregator

    return start
