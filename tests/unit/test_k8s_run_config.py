"""deploy/k8s/: the run: the aggregator keeps it on a volume and resumes, the run ConfigMap
passes deploy/entrypoint.py and is generated (hashed), so an edit rolls the pods.

Nothing here talks to a cluster; the variants are rendered offline (k8s_render.py, the
`rendered` fixture in conftest.py).
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.unit.k8s_render import RENDERER, ROOT, _pod_spec, _workloads


def test_aggregator_keeps_its_run_on_a_volume_and_resumes(rendered):
    (agg,) = [w for w in _workloads(rendered["base"]) if w["metadata"]["name"] == "aggregator"]
    assert agg["kind"] == "StatefulSet" and agg["spec"]["replicas"] == 1
    (c,) = _pod_spec(agg)["containers"]
    assert "--resume" in c["args"]
    out = next(a.split("=", 1)[1] for a in c["args"] if a.startswith("--out="))
    (claim,) = agg["spec"]["volumeClaimTemplates"]
    mount = next(m for m in c["volumeMounts"] if m["name"] == claim["metadata"]["name"])
    assert out.startswith(mount["mountPath"] + "/")
    # the join token comes as a file from the Secret, never in the process arguments
    assert not any(a.startswith("--join-token") for a in c["args"])
    token_file = next(e["value"] for e in c["env"] if e["name"] == "POWERTRIP_JOIN_TOKEN_FILE")
    assert any(token_file.startswith(m["mountPath"] + "/") for m in c["volumeMounts"])


def test_run_config_map_is_a_valid_run_for_the_entrypoint(rendered):
    spec = importlib.util.spec_from_file_location("k8s_entrypoint", ROOT / "deploy/entrypoint.py")
    entrypoint = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entrypoint)
    docs = rendered["base"]
    (run,) = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("powertrip-run-")
    ]
    config = entrypoint.run_config(run["data"])  # raises ConfigError on a bad/unknown key
    (workers,) = [w for w in _workloads(docs) if w["metadata"]["name"] == "site-worker"]
    assert workers["kind"] == "Job" and workers["spec"]["completionMode"] == "Indexed"
    assert (
        workers["spec"]["completions"]
        == workers["spec"]["parallelism"]
        == config.num_sites
        == int(run["data"]["POWERTRIP_RUN_NUM_SITES"])
    )
    # each pod's index is its site (entrypoint.indexed_job_args), and it exits 0 at the end
    assert _pod_spec(workers)["restartPolicy"] == "OnFailure"
    argv = entrypoint.indexed_job_args(["services.site_worker"], {"JOB_COMPLETION_INDEX": "3"})
    assert argv == ["services.site_worker", "--worker-id=site-worker-3", "--sites=site-003"]


def test_the_run_config_map_is_generated_so_an_edit_rolls_the_pods(rendered):
    """configMapGenerator: the ConfigMap's name carries a hash of run.env, and every workload
    refers to that name, so an edited run.env gives new pods (not a silent stale config)."""
    if RENDERER is None:
        pytest.skip("needs kustomize to run the generator")
    (run,) = [d for d in rendered["base"] if d["kind"] == "ConfigMap"]
    name = run["metadata"]["name"]
    assert name.startswith("powertrip-run-") and len(name) > len("powertrip-run-")
    for w in _workloads(rendered["base"]):
        refs = [e["configMapRef"]["name"] for c in _pod_spec(w)["containers"]
                for e in c.get("envFrom", [])]  # fmt: skip
        assert refs == [name], w["metadata"]["name"]
