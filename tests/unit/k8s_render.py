"""deploy/k8s/ rendered offline for the tests of its manifests (test_k8s_*.py; the
`rendered` fixture, every variant rendered once per test module, is in conftest.py).

Each variant is rendered with `kubectl kustomize` (or `kustomize build`); without either,
the base's resources are read as they are. Without kubernetes-validate (the offline schema
validation) every module that imports this one is skipped.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

kv = pytest.importorskip(
    "kubernetes_validate",
    reason="kubernetes-validate is not installed (pip install -e '.[dev]'): "
    "no offline schema validation of deploy/k8s",
)

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
K8S_VERSION = "1.30"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")
OVERLAYS = ("gpu", "shaping", "tls", "monitoring", "site-tokens")
#: rendered variants: base, each overlay, and all components together (a temporary overlay)
VARIANTS = ("base", *OVERLAYS, "all")
GPU = "nvidia.com/gpu"


def _renderer() -> list[str] | None:
    kubectl = shutil.which("kubectl")
    if (
        kubectl
        and subprocess.run([kubectl, "kustomize", "--help"], capture_output=True).returncode == 0
    ):
        return [kubectl, "kustomize"]
    kustomize = shutil.which("kustomize")
    return [kustomize, "build"] if kustomize else None


RENDERER = _renderer()


def _render_resources_only(directory: Path) -> list[dict]:
    """Fallback without kustomize: the base's `resources:` plus its namespace (no patches)."""
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert not spec.get("components") and not spec.get("patches"), "needs kustomize"
    docs = []
    for name in spec["resources"]:
        for doc in yaml.safe_load_all((directory / name).read_text()):
            if doc and doc["kind"] != "Namespace":
                doc["metadata"].setdefault("namespace", spec["namespace"])
            if doc:
                docs.append(doc)
    for generator in spec.get("configMapGenerator", []):  # as kustomize does, without the hash
        data = {}
        for env_file in generator.get("envs", []):
            for line in (directory / env_file).read_text().splitlines():
                if line.strip() and not line.startswith("#"):
                    key, _, value = line.partition("=")
                    data[key] = value
        name = f"{generator['name']}-unhashed"
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "data": data,
                     "metadata": {"name": name, "namespace": spec["namespace"]}})  # fmt: skip
        for doc in docs:
            for c in _pod_spec(doc)["containers"] if doc["kind"] in WORKLOAD_KINDS else []:
                for ref in c.get("envFrom", []):
                    if ref.get("configMapRef", {}).get("name") == generator["name"]:
                        ref["configMapRef"]["name"] = name
    for image in spec.get("images", []):
        for doc in docs:
            for c in _pod_spec(doc)["containers"] if doc["kind"] in WORKLOAD_KINDS else []:
                if c["image"] == image["name"]:
                    c["image"] = f"{image['name']}:{image['newTag']}"
    return docs


def _render(directory: Path) -> list[dict]:
    if RENDERER is None:
        if directory != K8S / "base":
            pytest.skip("neither kubectl nor kustomize is installed: overlays not rendered")
        return _render_resources_only(directory)
    out = subprocess.run([*RENDERER, str(directory)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _pod_spec(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


def _workloads(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d["kind"] in WORKLOAD_KINDS]


def _containers(docs: list[dict]):
    for w in _workloads(docs):
        for c in _pod_spec(w).get("initContainers", []) + _pod_spec(w)["containers"]:
            yield w, c


def _service_containers(docs: list[dict]):
    """The PowerTrip services' containers (not components/monitoring's Prometheus, Grafana)."""
    for w, c in _containers(docs):
        if w["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "monitoring":
            yield w, c


def _secrets_example() -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / "secrets.example.yaml").read_text()) if d]
