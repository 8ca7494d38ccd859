"""deploy/k8s/: every rendered object, and the example Secrets, validate against the
Kubernetes OpenAPI schema of K8S_VERSION in strict mode (unknown fields fail) with
kubernetes-validate.

Nothing here talks to a cluster; the variants are rendered offline (k8s_render.py, the
`rendered` fixture in conftest.py).
"""

from __future__ import annotations

import pytest

from tests.unit.k8s_render import K8S_VERSION, VARIANTS, _secrets_example, kv


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_object_validates_against_the_kubernetes_schema(rendered, variant):
    docs = rendered[variant]
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == [
        "ConfigMap", "Deployment", "Job", "Namespace", "NetworkPolicy", "PodDisruptionBudget",
        "Service", "StatefulSet",
    ], kinds  # fmt: skip
    for doc in docs:
        try:
            kv.validate(doc, K8S_VERSION, strict=True)
        except kv.ValidationError as exc:
            pytest.fail(f"{variant}: {doc['kind']}/{doc['metadata']['name']}: {exc.message}")
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "powertrip", doc["metadata"]["name"]


def test_the_example_secrets_validate():
    docs = _secrets_example()
    assert {d["metadata"]["name"] for d in docs} == {
        "powertrip-join-token", "powertrip-tls", "powertrip-grafana", "powertrip-site-tokens",
    }  # fmt: skip
    for doc in docs:
        kv.validate(doc, K8S_VERSION, strict=True)


def test_the_schema_check_is_strict():
    """An unknown field fails: strict mode is really on for K8S_VERSION."""
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}}
    kv.validate(doc, K8S_VERSION, strict=True)
    with pytest.raises(kv.ValidationError):
        kv.validate({**doc, "bogus": 1}, K8S_VERSION, strict=True)
