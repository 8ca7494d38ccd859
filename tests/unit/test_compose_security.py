"""The container deployment is secure and resilient by default (issue #16, items 4 and 5):

* deploy/docker-compose.yml publishes every port on 127.0.0.1 unless told otherwise, rotates
  every container's log, keeps Prometheus' data in a named volume, and passes the aggregator
  an explicit --insecure (a plaintext local emulation);
* deploy/docker-compose.tls.yml, merged by the real `docker-compose config`, gives every gRPC
  service mutual TLS from mounted files and the aggregator and workers the join token from a
  secret file, and drops --insecure (its command is otherwise the base's);
* deploy/healthcheck.py speaks TLS to a real mutual-TLS health server when POWERTRIP_TLS_*
  are set; make-certs.sh JOIN_TOKEN=1 writes a private token once;
* deploy/k8s passes the token as a file from the Secret, and only the plaintext base needs
  POWERTRIP_INSECURE=1.

The stack with the override really running: tests/e2e/test_compose_tls.py.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from concurrent import futures
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
GRPC_SERVICES = ("policy", "profiler", "aggregator", "site-worker")
SECRETS = "/run/secrets/powertrip"


def _compose_file(name: str = "docker-compose.yml") -> dict:
    return yaml.safe_load((DEPLOY / name).read_text())


def test_every_published_port_is_on_loopback_unless_overridden():
    for name, service in _compose_file()["services"].items():
        for port in service.get("ports", []):
            address = re.match(r"\$\{(POWERTRIP_\w*PUBLISH_ADDRESS):-([^}]*)\}:", port)
            assert address and address.group(2) == "127.0.0.1", f"{name}: {port}"
            assert address.group(1) in (DEPLOY / ".env").read_text(), address.group(1)


def test_every_service_rotates_its_log_and_prometheus_keeps_its_data():
    compose = _compose_file()
    for name, service in compose["services"].items():
        logging = service.get("logging", {})
        assert logging.get("driver") == "json-file", name
        assert {"max-size", "max-file"} <= set(logging.get("options", {})), name
    volumes = compose["services"]["prometheus"]["volumes"]
    assert "prometheus-data:/prometheus" in volumes  # the image's --storage.tsdb.path
    assert "prometheus-data" in compose["volumes"]
    assert "--storage.tsdb.path=/prometheus" in (DEPLOY / "prometheus/Dockerfile").read_text()


def test_the_plaintext_stack_says_insecure_and_the_tls_override_does_not():
    base = _compose_file()["services"]["aggregator"]["command"]
    tls = _compose_file("docker-compose.tls.yml")["services"]["aggregator"]["command"]
    assert "--insecure" in base
    # the override restates the command (compose replaces lists): the same, minus --insecure
    assert tls == [arg for arg in base if arg != "--insecure"]
    for name in ("docker-compose.yml", "docker-compose.tls.yml"):
        text = (DEPLOY / name).read_text()
        assert "POWERTRIP_INSECURE" not in text and "--join-token=" not in text, name


# ---- the merged stack, as compose itself sees it ----------------------------------------
def _compose() -> list[str] | None:
    if shutil.which("docker"):
        v2 = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if v2.returncode == 0:
            return ["docker", "compose"]
    return [shutil.which("docker-compose")] if shutil.which("docker-compose") else None


def _config(*files: str, env: dict[str, str]) -> dict:
    compose = _compose()
    if compose is None:
        pytest.skip("neither `docker compose` nor docker-compose installed (.ci/docker.sh)")
    args = [arg for name in files for arg in ("-f", str(DEPLOY / name))]
    done = subprocess.run(
        [*compose, *args, "config"],
        cwd=DEPLOY,
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)["services"]


def _env_of(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def _mounts(service: dict) -> dict[str, str]:
    """target -> source of the bind mounts (v1 prints strings, v2 mappings)."""
    found = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        found[target] = source
    return found


def _host_ips(service: dict) -> list[str]:
    ips = []
    for port in service.get("ports", []):
        ips.append(port["host_ip"] if isinstance(port, dict) else port.rsplit(":", 2)[0])
    return ips


def test_compose_config_merges_the_tls_override_into_every_grpc_service(tmp_path):
    secrets = tmp_path / "secrets"
    base = _config("docker-compose.yml", env={})
    merged = _config(
        "docker-compose.yml", "docker-compose.tls.yml", env={"POWERTRIP_SECRETS_DIR": str(secrets)}
    )
    assert "--insecure" in base["aggregator"]["command"]
    assert "--insecure" not in merged["aggregator"]["command"]
    for name, service in (*base.items(), *merged.items()):
        assert all(ip == "127.0.0.1" for ip in _host_ips(service)), (name, service.get("ports"))
        assert service["logging"]["driver"] == "json-file", name
    for name in GRPC_SERVICES:
        env, mounts = _env_of(merged[name]), _mounts(merged[name])
        cert = name  # make-certs.sh names each certificate after its compose service
        want = {
            env["POWERTRIP_TLS_CERT"]: secrets / f"{cert}.crt",
            env["POWERTRIP_TLS_KEY"]: secrets / f"{cert}.key",
            env["POWERTRIP_TLS_CA"]: secrets / "ca.crt",
        }
        for target, source in want.items():
            assert target.startswith(SECRETS + "/"), (name, target)
            assert Path(mounts[target]) == source, (name, target, mounts)
        # only its own key: no other service's key is mounted into it
        assert not [s for s in mounts.values() if s.endswith(".key") and cert not in s], name
        # the health check is the TLS-aware deploy/healthcheck.py
        assert "/app/deploy/healthcheck.py" in merged[name]["healthcheck"]["test"], name
        if name in ("aggregator", "site-worker"):
            token = env["POWERTRIP_JOIN_TOKEN_FILE"]
            assert Path(mounts[token]) == secrets / "join-token", (name, mounts)
        else:
            assert "POWERTRIP_JOIN_TOKEN_FILE" not in env, name
        assert "POWERTRIP_JOIN_TOKEN" not in env and "POWERTRIP_INSECURE" not in env, name
    for name in GRPC_SERVICES:
        assert "POWERTRIP_TLS_CERT" not in _env_of(base[name]), name


def test_publish_addresses_are_overridable(tmp_path):
    services = _config(
        "docker-compose.yml",
        env={"POWERTRIP_AGGREGATOR_PUBLISH_ADDRESS": "0.0.0.0", "POWERTRIP_PUBLISH_ADDRESS": "::1"},
    )
    assert _host_ips(services["aggregator"]) == ["0.0.0.0"]
    assert _host_ips(services["prometheus"]) == ["::1"]
    assert _host_ips(services["profiler"]) == ["127.0.0.1"]
    opened = _config("docker-compose.yml", env={"POWERTRIP_PROFILER_PUBLISH_ADDRESS": "0.0.0.0"})
    assert _host_ips(opened["profiler"]) == ["0.0.0.0"]


def test_total_sites_and_local_sites_are_separate_settings():
    """POWERTRIP_SITES is the run's site count, POWERTRIP_LOCAL_SITES the site-worker
    containers on this host: "5 sites, 3 of them here" (2 join with site bundles)."""
    services = _config(
        "docker-compose.yml", env={"POWERTRIP_SITES": "5", "POWERTRIP_LOCAL_SITES": "3"}
    )
    assert services["site-worker"]["scale"] == 3
    for name in GRPC_SERVICES:
        assert _env_of(services[name])["POWERTRIP_RUN_NUM_SITES"] == "5", name
    dotenv = dict(
        line.split("=", 1)
        for line in (DEPLOY / ".env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert dotenv["POWERTRIP_SITES"] == dotenv["POWERTRIP_LOCAL_SITES"]  # all local by default


# ---- healthcheck.py over TLS, against a real mutual-TLS health server --------------------
def _make_certs(out: Path, *names: str, env: dict[str, str] | None = None) -> Path:
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed: cannot make test certificates")
    subprocess.run(
        ["bash", str(DEPLOY / "tls/make-certs.sh"), str(out), *names],
        check=True,
        capture_output=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    return out


def test_healthcheck_speaks_tls_when_tls_is_configured(tmp_path):
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    certs = _make_certs(tmp_path / "certs", "svc")
    read = lambda name: (certs / name).read_bytes()  # noqa: E731
    server = grpc.server(futures.ThreadPoolExecutor(2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_secure_port(
        "127.0.0.1:0",
        grpc.ssl_server_credentials(
            [(read("svc.key"), read("svc.crt"))],
            root_certificates=read("ca.crt"),
            require_client_auth=True,
        ),
    )
    server.start()
    tls_env = {
        "POWERTRIP_TLS_CERT": str(certs / "svc.crt"),
        "POWERTRIP_TLS_KEY": str(certs / "svc.key"),
        "POWERTRIP_TLS_CA": str(certs / "ca.crt"),
    }
    clean = {k: v for k, v in os.environ.items() if not k.startswith("POWERTRIP_TLS")}

    def check(env: dict[str, str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(DEPLOY / "healthcheck.py"), str(port)],
            env={**clean, **env},
            capture_output=True,
            text=True,
            timeout=30,
        )

    try:
        done = check(tls_env)
        assert done.returncode == 0 and "SERVING" in done.stdout, done.stderr
        plain = check({})  # what the check did before: a TLS server refuses it
        assert plain.returncode == 1, plain.stdout
        partial = check({"POWERTRIP_TLS_CERT": tls_env["POWERTRIP_TLS_CERT"]})
        assert partial.returncode == 1 and "POWERTRIP_TLS_KEY" in partial.stderr
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert check(tls_env).returncode == 1
    finally:
        server.stop(None)


def test_make_certs_writes_a_private_join_token_once(tmp_path):
    out = _make_certs(tmp_path / "s", "x", env={"JOIN_TOKEN": "1"})
    token = (out / "join-token").read_text().strip()
    assert re.fullmatch(r"[0-9a-f]{64}", token)
    assert stat.S_IMODE((out / "join-token").stat().st_mode) == 0o600
    _make_certs(out, "y", env={"JOIN_TOKEN": "1"})  # workers hold it: never rotated silently
    assert (out / "join-token").read_text().strip() == token


# ---- Kubernetes: the token as a file; --insecure only where there is no TLS ---------------
def test_k8s_token_is_a_secret_file_and_only_plaintext_is_insecure(tmp_path):
    from tests.unit.k8s_render import K8S, RENDERER, _pod_spec, _render, _workloads

    variants = {"base": K8S / "base"}
    if RENDERER is not None:
        variants["tls"] = K8S / "overlays/tls"
    for variant, directory in variants.items():
        for workload in _workloads(_render(directory)):
            pod = _pod_spec(workload)
            (container,) = pod["containers"]
            env = {e["name"]: e for e in container["env"]}
            assert "POWERTRIP_JOIN_TOKEN" not in env, variant
            assert not any("join-token" in arg for arg in container["args"]), variant
            name = workload["metadata"]["name"]
            if name not in ("aggregator", "site-worker"):
                continue
            token = env["POWERTRIP_JOIN_TOKEN_FILE"]["value"]
            mount = next(
                m for m in container["volumeMounts"] if token.startswith(m["mountPath"] + "/")
            )
            volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
            assert volume["secret"]["secretName"] == "powertrip-join-token"
            assert {"key": "token", "path": Path(token).name} in volume["secret"]["items"]
            if name == "aggregator":
                want = "1" if variant == "base" else "0"
                assert env["POWERTRIP_INSECURE"]["value"] == want, variant


def test_grafana_takes_its_admin_password_from_a_file_and_gpu_workers_request_a_gpu(tmp_path):
    """Grafana never keeps its default admin/admin: the password is a mounted secret file.
    docker-compose.gpu.yml gives each site worker one NVIDIA GPU (a device request) and
    POWERTRIP_SITE_WORKER_DEVICE=cuda, and changes nothing else."""
    secrets = tmp_path / "secrets"
    env = {"POWERTRIP_SECRETS_DIR": str(secrets)}
    base = _config("docker-compose.yml", env=env)
    grafana_env, mounts = _env_of(base["grafana"]), _mounts(base["grafana"])
    assert "GF_SECURITY_ADMIN_PASSWORD" not in grafana_env
    password = grafana_env["GF_SECURITY_ADMIN_PASSWORD__FILE"]
    assert Path(mounts[password]) == secrets / "grafana-admin-password"
    gpu = _config("docker-compose.yml", "docker-compose.gpu.yml", env=env)
    (device,) = gpu["site-worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"] and device["count"] == 1
    assert _env_of(gpu["site-worker"])["POWERTRIP_SITE_WORKER_DEVICE"] == "cuda"

    def same(service: dict) -> dict:  # docker-compose may reorder the volumes it merges
        return {**service, "volumes": sorted(map(str, service.get("volumes", [])))}

    for name in base:
        if name != "site-worker":
            assert same(gpu[name]) == same(base[name]), name
