"""deploy/k8s/: components/tls's probe script against a real mutual-TLS gRPC health server,
and components/site-tokens (each site-worker pod presents its own site's token).

Nothing here talks to a cluster; the variants are rendered offline (k8s_render.py, the
`rendered` fixture in conftest.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.unit.k8s_render import K8S, ROOT, _pod_spec, _secrets_example, _workloads


def test_tls_probe_script_checks_health_over_mutual_tls(tmp_path):
    """components/tls/healthcheck_tls.py against a real mutual-TLS gRPC health server."""
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed: cannot make test certificates")
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    subprocess.run(
        ["bash", str(ROOT / "deploy/tls/make-certs.sh"), str(tmp_path), "svc"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    read = lambda name: (tmp_path / name).read_bytes()  # noqa: E731
    server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    creds = grpc.ssl_server_credentials(
        [(read("svc.key"), read("svc.crt"))],
        root_certificates=read("ca.crt"),
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    env = {
        **os.environ,
        "POWERTRIP_TLS_CERT": str(tmp_path / "svc.crt"),
        "POWERTRIP_TLS_KEY": str(tmp_path / "svc.key"),
        "POWERTRIP_TLS_CA": str(tmp_path / "ca.crt"),
    }
    script = [sys.executable, str(K8S / "components/tls/healthcheck_tls.py"), str(port)]
    try:
        assert subprocess.run(script, env=env, timeout=30).returncode == 0
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert subprocess.run(script, env=env, timeout=30).returncode == 1
    finally:
        server.stop(None)


def test_site_tokens_reach_the_aggregator_and_each_worker_presents_its_own(rendered, tmp_path):
    """components/site-tokens: the aggregator and every site-worker pod read the Secret's
    site-tokens.yaml through POWERTRIP_SITE_TOKENS; pod i hosts site i (its Job index), so the
    token it presents is site i's. The example Secret parses as the tokens file."""
    from powertrip.rpc.sitetokens import load_site_tokens

    for name in ("aggregator", "site-worker"):
        (w,) = [w for w in _workloads(rendered["site-tokens"]) if w["metadata"]["name"] == name]
        (c,) = _pod_spec(w)["containers"]
        path = next(e["value"] for e in c["env"] if e["name"] == "POWERTRIP_SITE_TOKENS")
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        folder, _, key = path.rpartition("/")
        volume = next(v for v in _pod_spec(w)["volumes"] if v["name"] == mounts[folder])
        assert volume["secret"]["secretName"] == "powertrip-site-tokens"
        assert [i["path"] for i in volume["secret"]["items"]] == [key]
    for w in _workloads(rendered["base"]):
        env = [e["name"] for c in _pod_spec(w)["containers"] for e in c.get("env", [])]
        assert "POWERTRIP_SITE_TOKENS" not in env, "only with the component"
    example = {d["metadata"]["name"]: d for d in _secrets_example()}["powertrip-site-tokens"]
    tokens_file = tmp_path / "site-tokens.yaml"
    tokens_file.write_text(example["stringData"]["site-tokens.yaml"])
    assert list(load_site_tokens(tokens_file)) == ["site-000"]
