"""deploy/k8s/: the objects of every variant fit together: referenced Secrets and ConfigMaps
exist, selectors match, Services reach a named port, scrape annotations name a container
port, NetworkPolicies open only ports their pods listen on.

Nothing here talks to a cluster; the variants are rendered offline (k8s_render.py, the
`rendered` fixture in conftest.py).
"""

from __future__ import annotations

import pytest

from tests.unit.k8s_render import (
    VARIANTS,
    _pod_spec,
    _secrets_example,
    _service_containers,
    _workloads,
)


@pytest.mark.parametrize("variant", VARIANTS)
def test_referenced_secrets_and_config_maps_exist(rendered, variant):
    docs = rendered[variant]
    secrets = {d["metadata"]["name"]: set(d["stringData"]) for d in _secrets_example()}
    config_maps = {d["metadata"]["name"]: set(d["data"]) for d in docs if d["kind"] == "ConfigMap"}
    used = []  # (kind, name, key or None)
    for w in _workloads(docs):
        pod = _pod_spec(w)
        for c in pod["containers"]:
            for e in c.get("env", []):
                ref = e.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    used.append(("Secret", ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"]))
                if "configMapKeyRef" in ref:
                    r = ref["configMapKeyRef"]
                    used.append(("ConfigMap", r["name"], r["key"]))
            for e in c.get("envFrom", []):
                if "configMapRef" in e:
                    used.append(("ConfigMap", e["configMapRef"]["name"], None))
                if "secretRef" in e:
                    used.append(("Secret", e["secretRef"]["name"], None))
            mounts = {m["name"] for m in c.get("volumeMounts", [])}
            volumes = {v["name"] for v in pod.get("volumes", [])}
            claims = {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
            assert mounts <= volumes | claims, f"{c['name']}: {mounts - volumes - claims}"
        for v in pod.get("volumes", []):
            for item_src, kind, name_key in (
                ("secret", "Secret", "secretName"),
                ("configMap", "ConfigMap", "name"),
            ):
                if item_src in v:
                    src = v[item_src]
                    keys = [i["key"] for i in src.get("items", [])] or [None]
                    used.extend((kind, src[name_key], k) for k in keys)
    assert ("Secret", "powertrip-join-token", "token") in used
    if variant in ("tls", "all"):
        assert {k for kind, n, k in used if n == "powertrip-tls"} == secrets["powertrip-tls"]
    for kind, name, key in used:
        known = secrets if kind == "Secret" else config_maps
        assert name in known, f"{variant}: {kind} {name} is referenced but not defined"
        assert key is None or key in known[name], f"{variant}: {kind} {name} has no key {key}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_selectors_match_and_services_reach_a_named_port(rendered, variant):
    docs = rendered[variant]
    for w in _workloads(docs):
        labels = w["spec"]["template"]["metadata"]["labels"]
        if w["kind"] == "Job":  # the Job controller makes its own selector
            assert "selector" not in w["spec"], w["metadata"]["name"]
            continue
        selector = w["spec"]["selector"]["matchLabels"]
        assert selector.items() <= labels.items(), w["metadata"]["name"]
        if w["kind"] == "StatefulSet":
            assert any(
                d["kind"] == "Service" and d["metadata"]["name"] == w["spec"]["serviceName"]
                for d in docs
            )
    for svc in (d for d in docs if d["kind"] == "Service"):
        assert svc["spec"]["type"] == "ClusterIP"
        targets = [
            w
            for w in _workloads(docs)
            if svc["spec"]["selector"].items()
            <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(targets) == 1, svc["metadata"]["name"]
        ports = {
            p["name"]: p["containerPort"]
            for c in _pod_spec(targets[0])["containers"]
            for p in c["ports"]
        }
        for p in svc["spec"]["ports"]:
            assert ports[p["targetPort"]] == p["port"], svc["metadata"]["name"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_scrape_annotations_name_an_exposed_metrics_port(rendered, variant):
    for w in {id(w): w for w, _ in _service_containers(rendered[variant])}.values():
        notes = w["spec"]["template"]["metadata"]["annotations"]
        assert notes["prometheus.io/scrape"] == "true"
        assert notes["prometheus.io/path"] == "/metrics"
        port = int(notes["prometheus.io/port"])
        (container,) = _pod_spec(w)["containers"]
        assert {"name": "metrics", "containerPort": port} in container["ports"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        metrics_env = [k for k in env if k.endswith("_METRICS_PORT")]
        assert [env[k] for k in metrics_env] == [str(port)], w["metadata"]["name"]


def _pods_matching(docs: list[dict], labels: dict) -> list[dict]:
    """The workloads whose pod template carries every label in `labels`."""
    return [
        w for w in _workloads(docs)
        if labels.items() <= w["spec"]["template"]["metadata"]["labels"].items()
    ]  # fmt: skip


@pytest.mark.parametrize("variant", VARIANTS)
def test_network_policies_open_only_ports_their_pods_listen_on(rendered, variant):
    """Each NetworkPolicy selects a workload (or all pods, the default deny), every port it
    opens is a container port of the pods it selects (in the shaping variant the link
    probe's 50061 exists; without it, a closed port opens nothing), and a peer it names
    exists; each PodDisruptionBudget selects a workload."""
    docs = rendered[variant]
    ports_of = {}
    for w in _workloads(docs):
        name = w["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
        containers = _pod_spec(w)["containers"]
        ports_of[name] = {p["containerPort"] for c in containers for p in c.get("ports", [])}
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert {p["metadata"]["name"] for p in policies} == {"default-deny-ingress", *ports_of}
    for policy in policies:
        selector = policy["spec"]["podSelector"].get("matchLabels", {})
        if not selector:
            assert policy["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in policy["spec"]
            continue
        (target,) = _pods_matching(docs, selector)
        name = target["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
        for rule in policy["spec"]["ingress"]:
            for port in rule["ports"]:
                probe = port["port"] == 50061 and variant not in ("shaping", "all")
                assert probe or port["port"] in ports_of[name], (variant, name, port)
            for peer in rule.get("from", []):
                assert _pods_matching(docs, peer["podSelector"]["matchLabels"]), peer
    for budget in (d for d in docs if d["kind"] == "PodDisruptionBudget"):
        assert len(_pods_matching(docs, budget["spec"]["selector"]["matchLabels"])) == 1
