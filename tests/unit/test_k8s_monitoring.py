"""deploy/k8s/: components/monitoring (Grafana's files are the compose stack's, every service
scraped, Grafana's login a Secret's file) and components/prometheus-operator's
ServiceMonitor.

Nothing here talks to a cluster; the variants are rendered offline (k8s_render.py, the
`rendered` fixture in conftest.py).
"""

from __future__ import annotations

import pytest
import yaml

from tests.unit.k8s_render import K8S, RENDERER, ROOT, _pod_spec, _render, _workloads


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
