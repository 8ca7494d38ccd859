"""deploy/k8s/: render the base and every overlay offline and check the objects.

Nothing here talks to a cluster. Each variant is rendered with `kubectl kustomize` (or
`kustomize build`), every object is validated against the Kubernetes OpenAPI schema of
K8S_VERSION in strict mode (unknown fields fail) with kubernetes-validate, and the
deployment's own rules are checked: gRPC probes, NET_ADMIN only with shaping, nvidia.com/gpu
only on site workers in the gpu overlay, referenced Secrets/ConfigMaps exist, selectors
match, scrape annotations name a container port, the run ConfigMap passes entrypoint.py.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
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


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, list[dict]]:
    result = {"base": _render(K8S / "base")}
    for overlay in OVERLAYS:
        result[overlay] = _render(K8S / "overlays" / overlay)
    # the components must compose: one overlay with all of them (in the tree, so the
    # relative paths resolve; removed afterwards)
    combined = K8S / "overlays" / f".test-all-{os.getpid()}"
    combined.mkdir()
    try:
        (combined / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": ["../../base"],
                    "components": [f"../../components/{c}" for c in OVERLAYS],
                }
            )
        )
        result["all"] = _render(combined)
    finally:
        shutil.rmtree(combined)
    return result


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


def test_monitoring_grafana_files_are_the_compose_stacks(rendered):
    """components/monitoring holds copies of deploy/grafana's files (kustomize reads nothing
    above its directory): they must not drift."""
    here = K8S / "components" / "monitoring"
    grafana = ROOT / "deploy" / "grafana"
    for copy, source in (
        ("dashboard-powertrip.json", "dashboards/powertrip.json"),
        ("grafana-datasource.yml", "provisioning/datasources/prometheus.yml"),
        ("grafana-dashboards.yml", "provisioning/dashboards/powertrip.yml"),
    ):
        assert (here / copy).read_bytes() == (grafana / source).read_bytes(), (
            f"cp deploy/grafana/{source} deploy/k8s/components/monitoring/{copy}"
        )


def test_monitoring_scrapes_every_service_and_guards_grafanas_login(rendered):
    """The powertrip-prometheus image's scrape configuration (deploy/prometheus/prometheus.yml,
    the compose stack's) finds every target through a Service of the same name and port;
    Grafana's datasource names the prometheus Service; its admin password is a Secret's file."""
    docs = rendered["monitoring"]
    services = {
        d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"
    }  # fmt: skip
    scrape = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    for job in scrape["scrape_configs"]:
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                host, port = target.split(":")
                if host != "localhost":
                    assert int(port) in {p["port"] for p in services[host]["spec"]["ports"]}, job
        for dns in job.get("dns_sd_configs", []):
            (name,) = dns["names"]
            assert services[name]["spec"]["clusterIP"] == "None", "one A record per pod"
            assert dns["port"] in {p["port"] for p in services[name]["spec"]["ports"]}
    source = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml")
                            .read_text())["datasources"][0]["url"]  # fmt: skip
    assert source == f"http://prometheus:{services['prometheus']['spec']['ports'][0]['port']}"
    (grafana,) = [w for w in _workloads(docs) if w["metadata"]["name"] == "grafana"]
    (c,) = _pod_spec(grafana)["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env  # never a literal
    secret_file = env["GF_SECURITY_ADMIN_PASSWORD__FILE"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in _pod_spec(grafana)["volumes"]}
    folder, _, key = secret_file.rpartition("/")
    assert volumes[mounts[folder]]["secret"]["secretName"] == "powertrip-grafana"
    assert [i["path"] for i in volumes[mounts[folder]]["secret"]["items"]] == [key]


def test_the_service_monitor_selects_every_metrics_port():
    """components/prometheus-operator (a CRD: not in the schema check): its ServiceMonitor
    selects the Services that carry a `metrics` port, one per PowerTrip service, and names
    each job after the Service, as the alert rules expect."""
    if RENDERER is None:
        pytest.skip("neither kubectl nor kustomize is installed")
    docs = _render(K8S / "overlays" / "prometheus-operator")
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    selector = monitor["spec"]["selector"]["matchLabels"]
    chosen = [
        d for d in docs
        if d["kind"] == "Service" and selector.items() <= d["metadata"]["labels"].items()
    ]  # fmt: skip
    assert {d["metadata"]["name"] for d in chosen} == {
        "aggregator", "policy", "profiler", "site-worker",
    }  # fmt: skip
    (endpoint,) = monitor["spec"]["endpoints"]
    for service in chosen:
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        label = service["metadata"]["labels"][monitor["spec"]["jobLabel"]]
        assert label == service["metadata"]["name"]


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
