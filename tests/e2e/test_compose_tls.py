"""The compose stack with mutual TLS and a join token from a secret file, for real:
`docker-compose -f docker-compose.yml -f docker-compose.tls.yml up` with certificates and a
token from `JOIN_TOKEN=1 deploy/tls/make-certs.sh`, the same images and small synthetic run
as tests/e2e/test_compose.py (shared helpers: stack_env, compose_command).

The run has 3 sites, 2 of them local (POWERTRIP_LOCAL_SITES): the third is a "remote"
worker started outside the compose project, as docs/deploy.md ("Running a site worker on
a remote GPU VM") says: `powertrip site-bundle`, then the bundle's own docker-run.sh, dialling
the aggregator's and the profiler's published ports over mutual TLS with the join token.
The ports are published on the host's docker0 address, where a plain `docker run` container
reaches them (the README publishes on 0.0.0.0 for other machines; loopback stays the
default, tests/unit/test_compose_security.py).

Checks: every container turns healthy (deploy/healthcheck.py over TLS) without a restart;
the site workers (shaped links, TLS to the profiler and the aggregator, token from the file)
and the remote one complete 3 rounds; the aggregator serves without --insecure and says
where its token came from; its published port refuses plaintext and a wrong token; logs
rotate; Prometheus keeps its data in the named volume. Then `down -v` leaves nothing of the
project behind. Skipped, with the reason, without a Docker engine or openssl.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from tests.e2e.test_compose import (
    _PROBLEM,
    SITES,
    TLS_ONLY_SERIES,
    _compose,
    _inspect,
    _run,
    _save_logs,
    _wait,
    bridge_address,
    compose_command,
    make_certs,
    make_site_bundle,
    stack_env,
)

ROUNDS_WANTED = 3
LOCAL = SITES - 1  # the last site joins from outside the project
SERVICES = ("policy", "profiler", "aggregator", "site-worker", "prometheus")

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1500)]
if _PROBLEM:
    pytestmark.append(pytest.mark.skip(reason=_PROBLEM))
elif shutil.which("openssl") is None:
    pytestmark.append(pytest.mark.skip(reason="openssl not installed: no certificates"))


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory):
    compose = _compose()
    project = f"pttls{os.getpid()}"
    runs = tmp_path_factory.mktemp("runs")
    secrets = tmp_path_factory.mktemp("secrets")
    bridge = bridge_address()
    # the aggregator's and the profiler's certificates also name the address remote workers
    # dial (the README: SANS=DNS:agg.example.org)
    make_certs(secrets, f"IP:{bridge}")
    env = stack_env(
        runs,
        "tls",
        POWERTRIP_POLICY="all",
        # keep the run going while the test looks at it; torn down at the end
        POWERTRIP_MAX_ROUNDS="100000",
        POWERTRIP_SECRETS_DIR=str(secrets),
        # its own tag: a compose test of another checkout running at the same time keeps its
        # images (the layers are shared, so this costs no build)
        POWERTRIP_TAG="e2e-tls",
        POWERTRIP_LOCAL_SITES=str(LOCAL),
        POWERTRIP_AGGREGATOR_PUBLISH_ADDRESS=bridge,
        POWERTRIP_PROFILER_PUBLISH_ADDRESS=bridge,
    )
    remote = f"powertrip-{project}-remote"
    cmd = compose_command(compose, project, env, ("docker-compose.tls.yml",))
    _run([*cmd, "build"], env=env, timeout=900)
    try:
        _run([*cmd, "up", "-d", "--no-build"], env=env, timeout=600)
        yield {"cmd": cmd, "env": env, "project": project, "secrets": secrets,
               "out": runs / "tls", "log": runs / "compose.log", "runs": runs,
               "bridge": bridge, "remote": remote}  # fmt: skip
    finally:
        _run(["docker", "rm", "-f", remote], check=False)
        if not (runs / "compose.log").exists():  # the test failed before its own `down`
            _save_logs(cmd, env, runs / "compose.log")
        _run([*cmd, "down", "-v", "--remove-orphans", "-t", "5"], env=env, check=False)


def _containers(stack) -> dict[str, list[str]]:
    return {
        s: _run([*stack["cmd"], "ps", "-q", s], env=stack["env"]).stdout.split() for s in SERVICES
    }


def _project_leftovers(project: str) -> list[str]:
    label = f"label=com.docker.compose.project={project}"
    found = []
    for kind in (["ps", "-aq"], ["volume", "ls", "-q"], ["network", "ls", "-q"]):
        found += _run(["docker", *kind, "--filter", label]).stdout.split()
    return found


def test_tls_stack_is_healthy_runs_rounds_and_tears_down(tls_stack):
    stack, secrets = tls_stack, tls_stack["secrets"]

    def all_healthy():
        found = _containers(stack)
        ids = [c for s in SERVICES for c in found[s]]
        if len(found["site-worker"]) != LOCAL or len(ids) != len(SERVICES) - 1 + LOCAL:
            return None
        states = {c: _inspect(c, "{{.State.Health.Status}}") for c in ids}
        return found if set(states.values()) == {"healthy"} else None

    containers = _wait("every container healthy (health checks over TLS)", all_healthy, 420)

    # the run waits for its last site: a remote worker from its bundle, outside the project
    def published(service: str, port: int) -> str:
        out = _run([*stack["cmd"], "port", service, str(port)], env=stack["env"]).stdout
        return out.strip()

    aggregator, profiler = published("aggregator", 50051), published("profiler", 50052)
    bridge = stack["bridge"]
    assert aggregator.startswith(f"{bridge}:") and profiler.startswith(f"{bridge}:")
    run_sh = make_site_bundle(
        secrets, stack["runs"] / "bundle", aggregator, profiler,
        stack["remote"].removeprefix("powertrip-"), "powertrip-trainer:e2e-tls",
    )  # fmt: skip
    started = subprocess.run(["sh", str(run_sh)], capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    rounds_csv = stack["out"] / "rounds.csv"
    _wait(
        f"{ROUNDS_WANTED} rounds",
        lambda: (
            rounds_csv.exists() and len(list(csv.DictReader(rounds_csv.open()))) >= ROUNDS_WANTED
        ),
        timeout_s=300,
        every_s=1,
    )
    remote_logs = _run(["docker", "logs", stack["remote"]])
    claimed = re.findall(r"claimed (site-\d+) from the profiler", remote_logs.stderr)
    assert claimed, remote_logs.stderr[-2000:]
    rows = list(csv.DictReader(rounds_csv.open()))
    assert all(claimed[0] in row["sites"].split(";") for row in rows), rows  # policy "all"
    print(f"remote worker {stack['remote']} trained {claimed[0]} over {bridge}")
    for cid in (c for ids in containers.values() for c in ids):
        assert _inspect(cid, "{{.RestartCount}}") == "0", f"{cid} restarted"
        log_config = _inspect(cid, "{{json .HostConfig.LogConfig}}")
        assert '"Type":"json-file"' in log_config and "max-size" in log_config, log_config

    # the aggregator: secured by token file and TLS, so no --insecure
    logs = _run([*stack["cmd"], "logs", "--no-color", "aggregator"], env=stack["env"]).stdout
    assert (
        "with the join token from POWERTRIP_JOIN_TOKEN_FILE=/run/secrets/powertrip/join-token, "
        "mutual TLS" in logs
    ), logs[-3000:]
    assert "--insecure" not in logs
    assert (secrets / "join-token").read_text().strip() not in logs

    # its published port (the address asked for): TLS only, the right token only
    host, port = aggregator.rsplit(":", 1)
    client = grpc.ssl_channel_credentials(
        root_certificates=(secrets / "ca.crt").read_bytes(),
        private_key=(secrets / "client.key").read_bytes(),
        certificate_chain=(secrets / "client.crt").read_bytes(),
    )
    target = f"{host}:{port}"
    with grpc.secure_channel(target, client) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as info:
            aggregator_pb2_grpc.AggregatorStub(channel).Register(
                aggregator_pb2.RegisterRequest(worker_id="intruder", join_token="wrong"),
                timeout=10,
            )
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with grpc.insecure_channel(target) as channel, pytest.raises(grpc.RpcError) as info:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE

    # Prometheus keeps its series in the named volume
    (prometheus,) = containers["prometheus"]

    # and scraped the certificate expiry the dashboard and PowerTripCertificateExpiresSoon use
    # (asked from inside its container: this stack does not publish Prometheus' port)
    def scraped(series: str) -> str:
        url = "http://127.0.0.1:9090/api/v1/query?query=" + series
        done = _run(["docker", "exec", prometheus, "python3", "-c",
                     f"import urllib.request as u; print(u.urlopen('{url}', timeout=5).read()"
                     ".decode())"], check=False)  # fmt: skip
        return series if '"result":[{' in done.stdout else ""

    for series in TLS_ONLY_SERIES:
        _wait(f"Prometheus scraped {series}", lambda s=series: scraped(s), 120)
    mounts = _inspect(prometheus, "{{range .Mounts}}{{.Name}}={{.Destination}} {{end}}")
    assert f"{stack['project']}_prometheus-data=/prometheus" in mounts, mounts

    # and `down -v` leaves nothing of the project: containers, volumes, networks
    _save_logs(stack["cmd"], stack["env"], stack["log"])
    _run(["docker", "rm", "-f", stack["remote"]])
    _run([*stack["cmd"], "down", "-v", "--remove-orphans", "-t", "5"], env=stack["env"])
    assert _project_leftovers(stack["project"]) == []
