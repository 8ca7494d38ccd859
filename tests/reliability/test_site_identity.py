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
import time

import grpc
import pytest
import yaml

from powertrip.app.cli import main as cli_main
from powertrip.app.provision import load_plan, provision
from powertrip.app.sitebundle import BundleSpec, make_bundle
from powertrip.core.config import RunConfig
from powertrip.rpc.certificates import certificate_file_facts
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


def _register(target, bundle, site, token, join_token, worker_id=""):
    with open_channel(target, _bundle_credentials(bundle)) as channel:
        return aggregator_pb2_grpc.AggregatorStub(channel).Register(
            aggregator_pb2.RegisterRequest(
                worker_id=worker_id or f"w-{bundle.name}-{site}", site_ids=[site],
                join_token=join_token, site_tokens={site: token},
            ),
            timeout=10,
        )  # fmt: skip


def _poll(target, bundle, reply):
    with open_channel(target, _bundle_credentials(bundle)) as channel:
        return aggregator_pb2_grpc.AggregatorStub(channel).NextTask(
            aggregator_pb2.NextTaskRequest(
                worker_id=reply.worker_id, session_token=reply.session_token, wait_s=0
            ),
            timeout=10,
        )


def _start_aggregator(service_factory, tmp_path, secrets, kits, *extra):
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
        "--metrics-port", str(metrics_port), *tls, *extra, wait_serving=False,
    )  # fmt: skip
    target = f"localhost:{aggregator.port}"
    wait_until_serving(target, credentials=_bundle_credentials(kits / "site-000"))
    return target, metrics_port


def test_a_sites_bundle_registers_as_itself_and_never_as_another_site(service_factory, tmp_path):
    secrets, kits = _kits(tmp_path)
    target, metrics_port = _start_aggregator(service_factory, tmp_path, secrets, kits)
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


def test_revoked_sites_and_certificates_are_refused_and_a_rotated_certificate_is_not(
    service_factory, tmp_path
):
    """`powertrip revoke` on the aggregator's --revoked file, while it runs: the revoked
    certificate can no longer poll (its session is cut off too), the site's new certificate
    (a rotation: a new bundle, same site and token) registers, and a revoked site cannot
    register with any certificate. Refusals are PERMISSION_DENIED, counted as `revoked`;
    certificate expiry is exported for the alert."""
    secrets, kits = _kits(tmp_path)
    revoked = tmp_path / "revoked.yaml"  # not there yet: nothing revoked
    target, metrics_port = _start_aggregator(
        service_factory, tmp_path, secrets, kits, "--revoked", str(revoked)
    )
    join = (secrets / "join-token").read_text().strip()
    tokens = load_site_tokens(kits / "aggregator" / "site-tokens.yaml")
    a = kits / "site-000"
    reply = _register(target, a, "site-000", tokens["site-000"], join, worker_id="vm-a")
    _poll(target, a, reply)  # allowed

    assert cli_main(["revoke", str(revoked), "--cert", str(a / "tls.crt")]) == 0
    deadline = time.monotonic() + 10
    while True:  # reloaded within about a second
        try:
            _poll(target, a, reply)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "revoked: its certificate" in exc.details()
            break
        assert time.monotonic() < deadline, "the revoked certificate can still poll"
        time.sleep(0.2)
    with pytest.raises(grpc.RpcError) as err:  # nor register again
        _register(target, a, "site-000", tokens["site-000"], join, worker_id="vm-a")
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED

    rotated = tmp_path / "rotated"  # site-000's new certificate, same token, same worker
    make_bundle(BundleSpec(
        secrets=secrets, out=rotated, aggregator="localhost:1", profiler="localhost:2",
        site="site-000", name="vm-a", gpus=False, site_token=tokens["site-000"],
    ))  # fmt: skip
    reply = _register(target, rotated, "site-000", tokens["site-000"], join, worker_id="vm-a")
    assert list(reply.site_ids) == ["site-000"]
    _poll(target, rotated, reply)

    assert cli_main(["revoke", str(revoked), "--site", "site-001"]) == 0
    time.sleep(1.5)
    with pytest.raises(grpc.RpcError) as err:
        _register(target, kits / "site-001", "site-001", tokens["site-001"], join)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "site(s) site-001 revoked" in err.value.details()

    seen = scrape(metrics_port)
    assert seen['powertrip_auth_failures_total{kind="revoked"}'] == 3
    expiry = seen['powertrip_site_certificate_expiry_timestamp_seconds{site="site-000"}']
    rotated_facts = certificate_file_facts(rotated / "tls.crt")
    assert expiry == pytest.approx(rotated_facts.expires_at_s)
    assert expiry > time.time() + 86400
    server = seen['powertrip_certificate_expiry_timestamp_seconds{certificate="server"}']
    assert server == pytest.approx(certificate_file_facts(secrets / "aggregator.crt").expires_at_s)


def test_a_bad_revocation_list_stops_the_aggregator_at_start(tmp_path):
    config = tmp_path / "run.yaml"
    RunConfig(workload="synthetic", num_sites=2).write_yaml(config)
    bad = tmp_path / "revoked.yaml"
    bad.write_text("certificates: [not-a-fingerprint]\n")
    done = subprocess.run(
        [sys.executable, "-m", "services.aggregator", "--config", str(config),
         "--host", "127.0.0.1", "--port", "0", "--insecure", "--revoked", str(bad)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 2
    assert "--revoked:" in done.stderr and "is not a SHA-256 fingerprint" in done.stderr
