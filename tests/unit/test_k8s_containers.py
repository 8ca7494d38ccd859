"""deploy/k8s/: the containers of every variant: gRPC health probes (the TLS check under
tls), NET_ADMIN only on the shaping site workers, nvidia.com/gpu only on site workers in
the gpu overlay.

Nothing here talks to a cluster; the variants are rendered offline (k8s_render.py, the
`rendered` fixture in conftest.py).
"""

from __future__ import annotations

import pytest

from tests.unit.k8s_render import GPU, VARIANTS, _containers, _pod_spec, _service_containers


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_container_probes_the_grpc_health_service(rendered, variant):
    tls = variant in ("tls", "all")
    names = set()
    for w, c in _service_containers(rendered[variant]):
        names.add(w["metadata"]["name"])
        grpc_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "grpc")
        assert f"--port={grpc_port}" in c["args"] or ["--port", str(grpc_port)] == c["args"][1:3]
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = c[kind]
            where = f"{variant}: {c['name']} {kind}"
            if tls:  # the kubelet's gRPC probe has no TLS: the pod's own TLS health check
                assert "grpc" not in probe, where
                assert probe["exec"]["command"] == [
                    "python",
                    "/opt/powertrip-tls-check/healthcheck_tls.py",
                    str(grpc_port),
                ], where
            else:
                assert probe == {**probe, "grpc": {"port": grpc_port}}, where
                assert "exec" not in probe and "httpGet" not in probe, where
    assert names == {"aggregator", "policy", "profiler", "site-worker"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_net_admin_only_on_shaping_site_workers(rendered, variant):
    shaping = variant in ("shaping", "all")
    for w, c in _containers(rendered[variant]):
        ctx = c.get("securityContext", {})
        caps = ctx.get("capabilities", {})
        assert caps.get("drop") == ["ALL"], c["name"]
        assert ctx.get("allowPrivilegeEscalation") is False, c["name"]
        assert not ctx.get("privileged"), c["name"]
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        pod_ctx = _pod_spec(w)["securityContext"]
        if shaping and c["name"] == "site-worker":
            assert caps.get("add") == ["NET_ADMIN"]
            assert env["POWERTRIP_SITE_WORKER_SHAPE_LINK"] == "1"
            assert ctx["runAsUser"] == 0  # tc needs the capability effective
        else:
            assert not caps.get("add"), f"{variant}: {c['name']} adds {caps.get('add')}"
            assert env.get("POWERTRIP_SITE_WORKER_SHAPE_LINK") in (None, "0"), c["name"]
            assert "POWERTRIP_SHAPE_LINK" not in env, c["name"]  # the old name
            assert "--shape-link" not in c.get("args", []), c["name"]
            assert pod_ctx["runAsNonRoot"] is True and pod_ctx["runAsUser"] != 0, c["name"]
            assert "runAsUser" not in ctx and ctx.get("runAsNonRoot") is not False, c["name"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_gpu_requested_by_site_workers_only_in_the_gpu_overlay(rendered, variant):
    gpu = variant in ("gpu", "all")
    for _, c in _containers(rendered[variant]):
        resources = c["resources"]
        assert resources["requests"].get("cpu") and resources["requests"].get("memory")
        assert resources["limits"].get("cpu") and resources["limits"].get("memory")
        wants = GPU in resources["limits"] or GPU in resources["requests"]
        if gpu and c["name"] == "site-worker":
            assert resources["limits"][GPU] == 1
            assert c["image"].endswith(":cuda")
        else:
            assert not wants, f"{variant}: {c['name']} requests a GPU"
