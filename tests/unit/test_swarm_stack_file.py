"""Static checks of deploy/swarm/stack.yml: what the swarm e2e test cannot show on one node
(placement, per-service secrets) and what must agree with the compose stack.  The stack
running for real: tests/e2e/test_swarm_stack.py."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.unit.test_deploy_files import DEPLOY

STACK = DEPLOY / "swarm" / "stack.yml"
GRPC_SERVICES = ("policy", "profiler", "aggregator", "site-worker")


def _stack() -> dict:
    return yaml.safe_load(STACK.read_text())


def _secret_targets(service: dict) -> dict[str, str]:
    return {s["target"]: s["source"] for s in service["secrets"]}


def test_stack_is_format_3_with_images_by_tag_and_no_build():
    stack = _stack()
    assert stack["version"].startswith("3.")
    for name, service in stack["services"].items():
        assert "build" not in service, name  # swarm ignores build: images come by tag
        assert ":" in service["image"], name
        assert service["deploy"]["restart_policy"]["condition"] == "on-failure", name
        assert "test" in service["healthcheck"], name
        assert service["networks"] == ["powertrip"], name
        # dnsrr: no IPVS virtual IPs (absent from some kernels, this CI machine's included)
        assert service["deploy"]["endpoint_mode"] == "dnsrr", name
    assert stack["networks"]["powertrip"]["driver"] == "overlay"


def test_every_service_gets_only_its_own_key_and_tls_is_always_on():
    stack = _stack()
    for name in GRPC_SERVICES:
        service = stack["services"][name]
        targets = _secret_targets(service)
        own = name.replace("-", "_")
        assert targets["tls.crt"] == f"{own}_crt" and targets["tls.key"] == f"{own}_key", name
        assert targets["ca.crt"] == "ca_crt", name
        env = service["environment"]
        assert env["POWERTRIP_TLS_KEY"] == "/run/secrets/tls.key", name
        private = [s for s in service["secrets"] if s["target"] in ("tls.key", "join-token")]
        assert all(s["mode"] == 0o400 for s in private), name
    for name in ("aggregator", "site-worker"):
        service = stack["services"][name]
        assert _secret_targets(service)["join-token"] == "join_token"
        assert service["environment"]["POWERTRIP_JOIN_TOKEN_FILE"] == "/run/secrets/join-token"
    for name in ("policy", "profiler"):
        assert "join-token" not in _secret_targets(stack["services"][name])
    aggregator = stack["services"]["aggregator"]["command"]
    assert "--insecure" not in aggregator and "--resume" in aggregator
    # only the two services remote workers dial are published
    published = {n for n, s in stack["services"].items() if s.get("ports")}
    assert published == {"aggregator", "profiler"}


def test_site_workers_are_placed_shaped_and_keep_their_site_across_restarts():
    services = _stack()["services"]
    worker = services["site-worker"]
    assert worker["cap_add"] == ["NET_ADMIN"] and "--shape-link" in worker["command"]
    assert worker["deploy"]["placement"]["constraints"] == ["node.labels.powertrip.gpu == true"]
    assert worker["deploy"]["replicas"] == "${POWERTRIP_LOCAL_SITES:-4}"
    # a replacement task has its slot's hostname, hence the same worker id and site
    assert worker["hostname"] == "site-worker-{{.Task.Slot}}"
    # the aggregator's run directory (checkpoints, audit) lives on one labelled node, and the
    # profiler beside it, so remote workers find both at that node's address
    for name in ("aggregator", "profiler"):
        constraints = services[name]["deploy"]["placement"]["constraints"]
        assert constraints == ["node.labels.powertrip.aggregator == true"], name
    assert any(v.endswith(":/app/runs") for v in services["aggregator"]["volumes"])


def test_run_settings_match_the_compose_stack():
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    compose_run = {k for k in compose["x-run-env"] if k.startswith("POWERTRIP_RUN_")}
    stack_run = {k for k in _stack()["x-run-env"] if k.startswith("POWERTRIP_RUN_")}
    assert stack_run == compose_run


def test_docker_loads_the_stack_file():
    """`docker stack config` (Docker CLI >= 23; not in Debian's 20.10) renders the file with
    Docker's own loader and schema, variables interpolated, without a swarm."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI")
    if subprocess.run([docker, "stack", "config", "--help"], capture_output=True).returncode:
        pytest.skip("this docker CLI has no `docker stack config` (CLI >= 23 has it)")
    done = subprocess.run(
        [docker, "stack", "config", "-c", str(STACK)],
        capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "POWERTRIP_LOCAL_SITES": "3", "POWERTRIP_SITES": "5"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rendered = yaml.safe_load(done.stdout)
    worker = rendered["services"]["site-worker"]
    assert worker["deploy"]["replicas"] == 3
    assert worker["environment"]["POWERTRIP_RUN_NUM_SITES"] == "5"
    assert worker["cap_add"] == ["NET_ADMIN"]
    ports = rendered["services"]["aggregator"]["ports"]
    assert [(p["target"], p["published"], p["mode"]) for p in ports] == [(50051, 50051, "host")]


def test_monitoring_finds_every_service_and_guards_grafanas_login():
    """deploy/swarm/monitoring.yml, deployed into the same stack: Prometheus's scrape
    configuration (the image's, deploy/prometheus/prometheus.yml) names services of the stack
    that resolve per task (endpoint_mode dnsrr) on the shared overlay; Grafana's admin password
    is a swarm secret and its provisioning files are deploy/grafana's."""
    stack = _stack()
    monitoring = yaml.safe_load((DEPLOY / "swarm" / "monitoring.yml").read_text())
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    named = {
        t.split(":")[0] for job in scrape["scrape_configs"]
        for s in job.get("static_configs", []) for t in s["targets"]
    } | {n for job in scrape["scrape_configs"] for d in job.get("dns_sd_configs", [])
         for n in d["names"]}  # fmt: skip
    named.discard("localhost")
    assert named == set(GRPC_SERVICES)
    for name in named:
        assert stack["services"][name]["deploy"]["endpoint_mode"] == "dnsrr", name
    for service in monitoring["services"].values():
        assert service["networks"] == ["powertrip"]
    grafana = monitoring["services"]["grafana"]
    assert "GF_SECURITY_ADMIN_PASSWORD" not in grafana["environment"]
    target = grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD__FILE"]
    (secret,) = grafana["secrets"]
    assert f"/run/secrets/{secret['target']}" == target
    assert secret["source"] in monitoring["secrets"]
    for config in monitoring["configs"].values():
        assert (DEPLOY / "swarm" / config["file"]).resolve().is_file(), config


def test_gpu_override_reserves_one_gpu_per_site_worker():
    gpu = yaml.safe_load((DEPLOY / "swarm" / "gpu.yml").read_text())
    assert set(gpu["services"]) == {"site-worker"}
    worker = gpu["services"]["site-worker"]
    (resource,) = worker["deploy"]["resources"]["reservations"]["generic_resources"]
    assert resource["discrete_resource_spec"] == {"kind": "NVIDIA-GPU", "value": 1}
    assert worker["environment"]["POWERTRIP_SITE_WORKER_DEVICE"] == "cuda"
