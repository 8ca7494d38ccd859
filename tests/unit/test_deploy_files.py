"""Static checks of deploy/: the files the container test builds and runs from agree with
the code (requirements, healthchecks, scrape jobs, the dashboard's and the alert rules'
metric names, counters graphed as rates, units and template variables)."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
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


DASHBOARD = DEPLOY / "grafana" / "dashboards" / "powertrip.json"
RULES = sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))
METRIC = re.compile(r"\b(?:powertrip|process|python)_[a-z0-9_]+")
#: a counter (or a histogram's counter parts) is only meaningful through one of these
COUNTER_FUNCTIONS = ("rate", "irate", "increase")


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _dashboard_exprs() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]


def _rule_exprs() -> list[str]:
    return [
        str(rule["expr"])
        for path in RULES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
    ]


def _metric_names(exprs: list[str]) -> set[str]:
    # words followed by "(" are functions, not series (none of ours is named like one)
    return {
        m.group(0) for e in exprs for m in METRIC.finditer(e) if not e[m.end() :].startswith("(")
    }


def _exposed_names() -> set[str]:
    """Every sample name the four services' registries expose (test_metrics_names.py builds
    them the way the services do)."""
    from tests.unit.test_metrics_names import exposed_names

    return exposed_names()


def _enclosing_function(expr: str, at: int) -> str:
    """The name of the function whose parentheses enclose position `at` in `expr`."""
    depth = 0
    for i in range(at - 1, -1, -1):
        if expr[i] == ")":
            depth += 1
        elif expr[i] == "(":
            if depth == 0:
                return re.search(r"([a-z_]*)\s*$", expr[:i]).group(1)
            depth -= 1
    return ""


def test_dashboard_and_rules_query_only_series_the_services_expose():
    exposed = _exposed_names()
    for source, exprs in (("dashboard", _dashboard_exprs()), ("rules", _rule_exprs())):
        missing = sorted(_metric_names(exprs) - exposed)
        assert not missing, f"{source} queries {missing}; no service registry exposes them"


def test_dashboard_graphs_counters_as_rates_not_raw_totals():
    for expr in _dashboard_exprs() + _rule_exprs():
        for m in METRIC.finditer(expr):
            if m.group(0).endswith(("_total", "_sum", "_count", "_bucket")):
                where = _enclosing_function(expr, m.start())
                assert where in COUNTER_FUNCTIONS, f"raw counter {m.group(0)} in {expr!r}"


def test_dashboard_panels_have_units_and_titles_for_every_topic():
    panels = _dashboard()["panels"]
    for panel in panels:
        assert panel.get("targets"), panel["title"]
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']}: no unit"
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in (
        "compute",
        "accuracy",
        "(k)",
        "power",
        "latency",
        "bandwidth",
        "bytes",
        "rejected",
        "deadline",
        "dead sites",
        "site failures",
        "fallbacks",
        "auth failures",
        "empty rounds",
        "malformed",
        "targets up",
        "memory",
    ):
        assert topic in titles, topic
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), ids


def test_dashboard_template_variables_are_defined_and_used():
    dashboard = _dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"job", "instance", "site"} <= set(variables)
    exprs = _dashboard_exprs()
    used = {name for e in exprs for name in re.findall(r"\$(\w+)", e)}
    assert used <= set(variables), f"undefined variables: {used - set(variables)}"
    assert {"job", "instance", "site"} <= used
    for name, var in variables.items():
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        assert _metric_names([query]) <= _exposed_names() | {"up"}, name
    site_metrics = {"powertrip_site_power_ratio", "powertrip_site_link_latency_seconds"}
    for expr in exprs:
        if _metric_names([expr]) & site_metrics:
            assert 'site=~"$site"' in expr, expr


def test_every_alert_series_has_a_dashboard_panel():
    shown = _metric_names(_dashboard_exprs()) | {"up"}
    for expr in _rule_exprs():
        names = _metric_names([expr]) | ({"up"} if re.search(r"\bup\{", expr) else set())
        assert names & shown, f"no panel shows the series of alert {expr!r}"


def test_dashboard_queries_are_valid_promql():
    """Each query, with its template variables as Grafana's "All", parses: checked by
    `promtool check rules` on a recording rule per query (promtool has no offline query
    check of its own)."""
    from tests.unit.test_metrics_names import promtool

    if promtool() is None:
        pytest.skip("promtool not installed (.ci/run installs it)")
    rules = [
        {"record": f"dashboard:query_{i}", "expr": re.sub(r"\$\w+", ".*", e)}
        for i, e in enumerate(_dashboard_exprs())
    ]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dashboard.yml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
        done = subprocess.run(
            [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 0, done.stdout + done.stderr


def _entrypoint():
    import importlib.util

    spec = importlib.util.spec_from_file_location("entrypoint", DEPLOY / "entrypoint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_entrypoint_builds_the_run_config_from_the_environment():
    from powertrip.core.config import ConfigError

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


def test_images_run_unprivileged_and_only_the_listed_services_run_as_root():
    """The Dockerfile's service images end with USER 65532; compose and Swarm run a service as
    root only where docs/deploy.md's "Who runs as root" says it must (bind-mounted host
    files, tc), and Swarm hands the non-root services their secrets as uid 65532."""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", dockerfile, flags=re.M)[1:]
    final = {s.split()[2]: s for s in stages if " AS " in s.split("\n")[0]}
    for target in ("services", "trainer"):
        users = re.findall(r"^USER (\S+)", final[target], flags=re.M)
        assert users == ["65532:65532"], (target, users)
        assert final[target].rstrip().splitlines()[-1].startswith("ENTRYPOINT")
    assert "useradd --system --uid 65532" in dockerfile

    def as_root(path: str) -> set[str]:
        services = yaml.safe_load((DEPLOY / path).read_text())["services"]
        return {name for name, s in services.items() if str(s.get("user", "")) in ("root", "0")}

    assert as_root("docker-compose.yml") == {"aggregator", "site-worker"}
    assert as_root("docker-compose.tls.yml") == {"policy", "profiler"}
    assert as_root("swarm/stack.yml") == {"site-worker"}
    stack = yaml.safe_load((DEPLOY / "swarm" / "stack.yml").read_text())["services"]
    for name in ("policy", "profiler", "aggregator"):
        for secret in stack[name]["secrets"]:
            assert (secret["uid"], secret["gid"]) == ("65532", "65532"), (name, secret)
    table = (
        (REPO / "docs" / "deploy.md").read_text().split("## Who runs as root")[1].split("\n## ")[0]
    )
    for name in ("`aggregator`", "`site-worker`", "`policy`, `profiler`"):
        assert name in table


def test_make_demo_installs_the_base_only():
    """`make demo` needs no extras: it sets up with EXTRAS= (the base install) unless a
    current install is there, and does not depend on `setup` (which installs every extra)."""
    makefile = (REPO / "Makefile").read_text()
    head, _, rest = makefile.partition("\ndemo:")
    prerequisites = rest.split("##")[0].split("\n")[0]
    assert "setup" not in prerequisites, prerequisites
    recipe = rest.split("\n\n")[0]
    assert "setup EXTRAS=;" in recipe.replace(" \\\n", " "), recipe
    # and an empty EXTRAS installs `-e .`, not `-e .[]`
    assert '-e ".$(if $(EXTRAS),[$(EXTRAS)])"' in makefile
