"""One identity per site, end to end: bundles from `powertrip provision`, an aggregator with
mutual TLS, `--site-tokens` and `--site-certs` (a real process), and Register calls made with
each bundle's own certificate and token. Site A's bundle registers as A; it cannot register
as B, neither with B's stolen token nor with its own; each refusal is PERMISSION_DENIED and
counted in powertrip_auth_failures_total. A worker can only poll and upload for the sites it
registered (its session is bound to them: test_services.py), so registration is the gate."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import grpc
import pytest
import yaml

from powertrip.app.provision import load_plan, provision
from powertrip.core.config import RunConfig
from powertrip.rpc.channels import open_channel, wait_until_serving
from powertrip.rpc.sitetokens import load_site_tokens
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from tests.reliability.procs import REPO, free_port, scrape

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")


def _kits(tmp_path):
    secrets = tmp_path / "secrets"
    subprocess.run(
        ["bash", str(REPO / "deploy/tls/make-certs.sh"), str(secrets), "aggregator", "client"],
        check=True, capture_output=True, timeout=120, env={**os.environ, "JOIN_TOKEN": "1"},
    )  # fmt: skip
    sites = tmp_path / "sites.yaml"
    sites.write_text(yaml.safe_dump({
        "deployment": "test", "aggregator": "localhost:1", "profiler": "localhost:2",
        "gpus": False, "sites": ["site-000", "site-001"],
    }))  # fmt: skip
    provision(load_plan(sites), secrets, tmp_path / "kits")
    return secrets, tmp_path / "kits"


def _bundle_credentials(bundle) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=(bundle / "ca.crt").read_bytes(),
        private_key=(bundle / "tls.key").read_bytes(),
        certificate_chain=(bundle / "tls.crt").read_bytes(),
    )


def _register(target, bundle, site, token, join_token):
    with open_channel(target, _bundle_credentials(bundle)) as channel:
        return aggregator_pb2_grpc.AggregatorStub(channel).Register(
            aggregator_pb2.RegisterRequest(
                worker_id=f"w-{bundle.name}-{site}", site_ids=[site], join_token=join_token,
                site_tokens={site: token},
            ),
            timeout=10,
        )  # fmt: skip


def test_a_sites_bundle_registers_as_itself_and_never_as_another_site(service_factory, tmp_path):
    secrets, kits = _kits(tmp_path)
    config = tmp_path / "run.yaml"
    RunConfig(workload="synthetic", num_sites=2, max_rounds=2, seed=2).write_yaml(config)
    metrics_port = free_port()
    tls = ["--tls-cert", str(secrets / "aggregator.crt"), "--tls-key",
           str(secrets / "aggregator.key"), "--tls-ca", str(secrets / "ca.crt")]  # fmt: skip
    aggregator = service_factory(
        "aggregator", "--config", str(config), "--out", str(tmp_path / "run"),
        "--profiler", "localhost:1", "--policy", "localhost:1",
        "--join-token-file", str(secrets / "join-token"),
        "--site-tokens", str(kits / "aggregator" / "site-tokens.yaml"), "--site-certs",
        "--metrics-port", str(metrics_port), *tls, wait_serving=False,
    )  # fmt: skip
    target = f"localhost:{aggregator.port}"
    wait_until_serving(target, credentials=_bundle_credentials(kits / "site-000"))
    join = (secrets / "join-token").read_text().strip()
    tokens = load_site_tokens(kits / "aggregator" / "site-tokens.yaml")
    a, b = kits / "site-000", kits / "site-001"

    reply = _register(target, a, "site-000", tokens["site-000"], join)
    assert list(reply.site_ids) == ["site-000"] and reply.session_token

    for what, token in (
        ("B's stolen token", tokens["site-001"]),
        ("A's own token", tokens["site-000"]),
    ):
        with pytest.raises(grpc.RpcError) as err:
            _register(target, a, "site-001", token, join)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, what
        assert "site-001: not named by the caller's certificate" in err.value.details(), what

    reply = _register(target, b, "site-001", tokens["site-001"], join)  # B itself still can
    assert list(reply.site_ids) == ["site-001"]
    refused = scrape(metrics_port)
    assert refused['powertrip_auth_failures_total{kind="site_certificate"}'] == 2


def test_site_certs_without_mutual_tls_is_refused_at_start(tmp_path):
    config = tmp_path / "run.yaml"
    RunConfig(workload="synthetic", num_sites=2).write_yaml(config)
    done = subprocess.run(
        [sys.executable, "-m", "services.aggregator", "--config", str(config),
         "--host", "127.0.0.1", "--port", "0", "--site-certs"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 2 and "--site-certs checks each worker's client certificate" in (
        done.stderr
    )
