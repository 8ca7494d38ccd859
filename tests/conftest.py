"""Shared fixtures: run services as real processes on loopback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from powertrip.app.experiments.launcher import start_service
from powertrip.core.kernels import configure_torch, pin_cpu_kernels

# the kernels every run uses (powertrip.core.kernels), for the tests that train in this
# process, before any of them runs a tensor op; the processes they start inherit them
pin_cpu_kernels()
configure_torch()

#: tests marked `docker` build images and init a swarm on the engine they find: on a
#: developer's laptop that is their own engine, so they run only when asked (.ci/run asks)
DOCKER_OPT_IN = "POWERTRIP_DOCKER_TESTS"


def pytest_collection_modifyitems(config, items):
    if os.environ.get(DOCKER_OPT_IN) == "1":
        return
    skip = pytest.mark.skip(
        reason=f"changes the Docker engine (builds images, docker swarm init); set "
        f"{DOCKER_OPT_IN}=1 to run it (.ci/run does)"
    )
    for item in items:
        if "docker" in item.keywords:
            item.add_marker(skip)


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


@pytest.fixture(scope="session")
def site_jobs():
    """jobs(workload, num_sites, partitions, seed=0): round 1's SiteJobs (data and seed) of
    the first num_sites sites of a seeded partition, as the trainers' tests feed them."""
    from powertrip.core.batched import SiteJob
    from powertrip.core.training import site_seed

    def jobs(workload, num_sites: int, partitions: int, seed: int = 0) -> list[SiteJob]:
        data = workload.load(None, seed)
        part = workload.partition(data, partitions, seed)
        return [
            SiteJob(
                data.train.x[part.site_indices[s]],
                data.train.y[part.site_indices[s]],
                site_seed(seed, 1, s),
            )
            for s in range(num_sites)
        ]

    return jobs


@pytest.fixture(scope="module")
def secrets(tmp_path_factory) -> Path:
    """A deployment's CA, an aggregator certificate and a join token, as
    `JOIN_TOKEN=1 deploy/tls/make-certs.sh DIR aggregator` writes them (openssl)."""
    import subprocess

    out = tmp_path_factory.mktemp("secrets")
    subprocess.run(
        ["bash", str(Path(__file__).resolve().parents[1] / "deploy" / "tls" / "make-certs.sh"),
         str(out), "aggregator"],
        check=True, capture_output=True, timeout=120, env={**os.environ, "JOIN_TOKEN": "1"},
    )  # fmt: skip
    return out
