"""The aggregator's allowed ways to serve (issue #16, item 4), as real processes: on an
exposed address with a join token from a secret file and mutual TLS, on an exposed address
with an explicit --insecure, and on loopback with neither; and a site worker that reads its
token from a file and completes a run. The refusals are tests/unit/test_secure_by_default.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from powertrip.core.config import RunConfig
from powertrip.rpc.auth import JOIN_TOKEN_ENV, JOIN_TOKEN_FILE_ENV
from powertrip.rpc.channels import open_channel, wait_until_serving
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from tests.reliability.procs import wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def run_yaml(tmp_path) -> Path:
    path = tmp_path / "run.yaml"
    RunConfig(
        workload="synthetic", num_sites=1, max_rounds=1, seed=2, policy="all",
        target_accuracy=0.999, round_deadline_s=60,
    ).write_yaml(path)  # fmt: skip
    return path


def _certs(out: Path) -> Path:
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed: cannot make test certificates")
    subprocess.run(
        ["bash", str(REPO / "deploy/tls/make-certs.sh"), str(out), "aggregator", "client"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return out


def _client(certs: Path) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=(certs / "ca.crt").read_bytes(),
        private_key=(certs / "client.key").read_bytes(),
        certificate_chain=(certs / "client.crt").read_bytes(),
    )


def _register(target: str, token: str, credentials=None) -> aggregator_pb2.RegisterResponse:
    with open_channel(target, credentials) as channel:
        return aggregator_pb2_grpc.AggregatorStub(channel).Register(
            aggregator_pb2.RegisterRequest(
                worker_id="probe", site_ids=["site-000"], join_token=token
            ),
            timeout=10,
        )


def _serving_log(service) -> str:
    return next(
        (line for line in service.log_path.read_text().splitlines() if "serving on" in line), ""
    )


def test_exposed_with_token_file_and_tls_serves_and_the_file_beats_the_env(
    service_factory, run_yaml, tmp_path, monkeypatch
):
    certs = _certs(tmp_path / "certs")
    token_file = tmp_path / "join-token"
    token_file.write_text("token-from-the-secret-file\n")
    # the file wins over the variable: a worker with the variable's token is refused
    monkeypatch.setenv(JOIN_TOKEN_ENV, "token-from-the-environment")
    monkeypatch.setenv(JOIN_TOKEN_FILE_ENV, str(token_file))
    agg = service_factory(
        "aggregator", "--host", "0.0.0.0", "--config", str(run_yaml),
        "--out", str(tmp_path / "run"), "--tls-cert", str(certs / "aggregator.crt"),
        "--tls-key", str(certs / "aggregator.key"), "--tls-ca", str(certs / "ca.crt"),
        wait_serving=False,
    )  # fmt: skip
    client = _client(certs)
    wait_until_serving(agg.target, credentials=client)
    with pytest.raises(grpc.RpcError) as info:
        _register(agg.target, "token-from-the-environment", client)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _register(agg.target, "token-from-the-secret-file", client).session_token
    with pytest.raises(grpc.RpcError) as info:  # and the port speaks TLS only
        _register(agg.target, "token-from-the-secret-file")
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    line = _serving_log(agg)
    assert f"the join token from {JOIN_TOKEN_FILE_ENV}={token_file}, mutual TLS" in line, line
    assert "WARNING" not in line
    assert "token-from" not in agg.log_path.read_text()  # the token itself is never logged


def test_exposed_with_insecure_serves_and_warns(service_factory, run_yaml, tmp_path):
    agg = service_factory(
        "aggregator", "--host", "0.0.0.0", "--insecure", "--config", str(run_yaml),
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    with open_channel(agg.target) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    line = _serving_log(agg)
    assert "WARNING" in line and "no join token, no TLS (--insecure)" in line, line


def test_loopback_needs_neither_and_a_worker_joins_with_its_token_file(
    service_factory, stack_factory, run_yaml, tmp_path
):
    """The embedded path (every service on 127.0.0.1, as `powertrip run` starts them) needs
    no flag; a worker reading the token from --join-token-file completes the run."""
    token_file = tmp_path / "join-token"
    token_file.write_text("worker-token-0123456789\n")
    out = tmp_path / "run"
    _, _, agg = stack_factory(
        run_yaml, out, "--join-token", "worker-token-0123456789", "--exit-when-done"
    )
    assert "serving on 127.0.0.1 with the join token from --join-token, no TLS" in _serving_log(agg)
    service_factory(
        "site_worker", "--aggregator", agg.target, "--sites", "site-000", "--worker-id", "w0",
        "--join-token-file", str(token_file), wait_serving=False,
    )  # fmt: skip
    wait_for(lambda: (out / "summary.json").exists(), 180, "the run to finish")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done" and summary["rounds"] == 1, summary
