"""Mutual TLS over loopback with real certificates from deploy/tls/make-certs.sh: every
service and the site worker run with --tls-*, a whole run completes, and a caller without a
certificate, with no TLS, or with a certificate from another CA is refused."""

from __future__ import annotations

import json
import subprocess

import grpc
import pytest

from powertrip.core.config import RunConfig
from powertrip.rpc.channels import open_channel, wait_until_serving
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from tests.reliability.procs import REPO, wait_for

pytestmark = pytest.mark.slow


def _certs(out, *names):
    subprocess.run(
        ["bash", str(REPO / "deploy/tls/make-certs.sh"), str(out), *names],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def _tls(certs, name):
    return ["--tls-cert", str(certs / f"{name}.crt"), "--tls-key", str(certs / f"{name}.key"),
            "--tls-ca", str(certs / "ca.crt")]  # fmt: skip


def _creds(certs, name=None, ca=None):
    ca_bytes = (ca or certs / "ca.crt").read_bytes()
    if name is None:
        return grpc.ssl_channel_credentials(root_certificates=ca_bytes)
    return grpc.ssl_channel_credentials(
        root_certificates=ca_bytes,
        private_key=(certs / f"{name}.key").read_bytes(),
        certificate_chain=(certs / f"{name}.crt").read_bytes(),
    )


def _status(target, credentials):
    with open_channel(target, credentials) as channel:
        return aggregator_pb2_grpc.AggregatorStub(channel).GetStatus(
            aggregator_pb2.GetStatusRequest(), timeout=5
        )


def test_mutual_tls_run_and_refusals(service_factory, tmp_path):
    certs = _certs(tmp_path / "certs")
    rogue = _certs(tmp_path / "rogue", "client")
    config = RunConfig(
        workload="synthetic", num_sites=2, max_rounds=2, seed=4, policy="all",
        target_accuracy=0.999, round_deadline_s=120,
    )  # fmt: skip
    path = tmp_path / "run.yaml"
    config.write_yaml(path)
    client = _creds(certs, "client")
    started = {}
    for name, args in (
        ("profiler", ["--config", str(path)]),
        ("policy", []),
    ):
        started[name] = service_factory(name, *args, *_tls(certs, name), wait_serving=False)
        wait_until_serving(started[name].target, credentials=client)
    out = tmp_path / "run"
    agg = service_factory(
        "aggregator", "--config", str(path), "--out", str(out), "--exit-when-done",
        "--profiler", f"localhost:{started['profiler'].port}",
        "--policy", f"localhost:{started['policy'].port}",
        *_tls(certs, "aggregator"), wait_serving=False,
    )  # fmt: skip
    wait_until_serving(agg.target, credentials=client)

    assert _status(agg.target, client).num_sites == 2
    for what, creds in (
        ("no TLS at all", None),
        ("TLS without a client certificate", _creds(certs)),
        ("a certificate from another CA", _creds(rogue, "client", ca=certs / "ca.crt")),
    ):
        with pytest.raises(grpc.RpcError) as info:
            _status(agg.target, creds)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE, what

    # a site worker dials the aggregator with its own certificate; the run completes
    service_factory(
        "site_worker", "--aggregator", f"localhost:{agg.port}", "--sites", "site-000,site-001",
        "--worker-id", "w0", *_tls(certs, "site-worker"), wait_serving=False,
    )  # fmt: skip
    wait_for(lambda: (out / "summary.json").exists(), 180, "the run to finish")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done" and summary["rounds"] == 2, summary["message"]


def test_incomplete_tls_flags_are_named(tmp_path, capsys):
    from services.profiler.__main__ import main as profiler

    certs = _certs(tmp_path / "certs", "profiler")
    code = profiler(["--port", "0", "--tls-cert", str(certs / "profiler.crt")])
    assert code == 2
    err = capsys.readouterr().err
    assert "--tls-key" in err and "--tls-ca" in err
