"""Static checks of deploy/: the files the container test builds and runs from agree with
the code (requirements, healthchecks, scrape jobs, the dashboard's metric names)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def _requirements(name: str) -> list[str]:
    lines = (DEPLOY / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_image_requirements_are_the_projects_own():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    deps = set(pyproject["project"]["dependencies"])
    for name in ("requirements-services.txt", "requirements-trainer.txt"):
        for req in _requirements(name):
            assert req in deps, f"deploy/{name}: {req!r} differs from pyproject.toml"
    assert not any(r.startswith("torch") for r in _requirements("requirements-services.txt"))


def test_compose_services_are_healthchecked_and_ordered_on_health():
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"aggregator", "policy", "profiler", "site-worker", "prometheus", "grafana"} <= set(
        services
    )
    for name, service in services.items():
        assert "test" in service.get("healthcheck", {}), f"{name} has no healthcheck"
        for dep, cond in service.get("depends_on", {}).items():
            assert cond == {"condition": "service_healthy"}, (name, dep)
    worker = services["site-worker"]
    assert "NET_ADMIN" in worker["cap_add"] and "--shape-link" in worker["command"]
    assert services["grafana"]["profiles"] == ["grafana"]  # optional: needs a registry


def test_prometheus_scrapes_every_service():
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert {"aggregator", "policy", "profiler", "site-worker", "prometheus"} <= jobs


def test_dashboard_queries_only_metrics_the_services_define():
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "powertrip.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    source = "\n".join(p.read_text() for p in (REPO / "services").rglob("*.py"))
    for name in {n for e in exprs for n in re.findall(r"\bpowertrip_[a-z0-9_]+", e)}:
        base = re.sub(r"_(total|bucket|sum|count)$", "", name)
        assert f'"{base}"' in source, f"dashboard queries {name}; no service defines {base}"
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in (
        "compute",
        "accuracy",
        "(k)",
        "power",
        "latency",
        "bandwidth",
        "bytes",
        "rejected",
    ):
        assert topic in titles, topic


def _entrypoint():
    import importlib.util

    spec = importlib.util.spec_from_file_location("entrypoint", DEPLOY / "entrypoint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_entrypoint_builds_the_run_config_from_the_environment():
    from powertrip.config import ConfigError

    entry = _entrypoint()
    config = entry.run_config(
        {
            "POWERTRIP_RUN_WORKLOAD": "synthetic",
            "POWERTRIP_RUN_NUM_SITES": "3",
            "POWERTRIP_RUN_CLOCK": "wall",
            "POWERTRIP_RUN_TARGET_ACCURACY": "",  # empty: leave the default
            "POWERTRIP_RUN_MAX_DISTANCE_MILES": "4000",
        }
    )
    assert (config.workload, config.num_sites, config.clock) == ("synthetic", 3, "wall")
    assert config.target_accuracy is None and config.max_distance_miles == 4000.0
    with pytest.raises(ConfigError, match="POWERTRIP_RUN_NUM_SITE"):
        entry.run_config({"POWERTRIP_RUN_NUM_SITE": "3"})  # misspelt: named, not ignored
    with pytest.raises(ConfigError, match="clock"):
        entry.run_config({"POWERTRIP_RUN_CLOCK": "sundial"})
