"""The Prometheus alert rules (deploy/prometheus/rules/) are valid, wired in, tested and
actionable: `promtool check rules` and `promtool test rules` when promtool is installed
(.ci/run installs it from Debian's prometheus package), and the structure checks always."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.test_metrics_names import promtool

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = REPO / "deploy" / "prometheus"
RULE_FILES = sorted((PROMETHEUS / "rules").glob("*.yml"))
TEST_FILES = sorted((PROMETHEUS / "tests").glob("*_test.yml"))
needs_promtool = pytest.mark.skipif(
    promtool() is None, reason="promtool not installed (.ci/run installs it)"
)

#: what #18 asked the alerts to cover: a fragment each alert's expression must contain
WANTED = {
    "target down": "up{",
    "dead sites": "powertrip_dead_sites",
    "site failures rising": "powertrip_site_failures_total",
    "policy fallbacks": "powertrip_policy_fallbacks_total",
    "profiler fallbacks": "powertrip_profiler_fallbacks_total",
    "auth failures": "powertrip_auth_failures_total",
    "rounds near the deadline": "powertrip_round_deadline_seconds",
    "rejected deltas rising": "powertrip_delta_rejected_total",
    "malformed requests rising": "powertrip_malformed_requests_total",
}


def alert_rules() -> list[dict]:
    return [
        rule
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [promtool(), *args], capture_output=True, text=True, timeout=120, cwd=REPO
    )


def test_every_topic_has_an_alert_with_severity_summary_and_description():
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)), names
    for topic, fragment in WANTED.items():
        assert any(fragment in r["expr"] for r in rules), f"no alert for {topic} ({fragment})"
    for rule in rules:
        name = rule["alert"]
        assert rule.get("labels", {}).get("severity") in ("critical", "warning"), name
        notes = rule.get("annotations", {})
        assert notes.get("summary", "").strip(), f"{name}: no summary"
        # actionable: long enough to say what to check, and it names something to look at
        text = notes.get("description", "")
        assert len(text) > 150, f"{name}: description too short to act on"
        assert any(w in text for w in ("Check", "check", "Look", "Find")), name


def test_prometheus_loads_the_rule_files_in_the_image_and_under_compose():
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    globs = config["rule_files"]
    loaded = {p for g in globs for p in PROMETHEUS.glob(g)}
    assert set(RULE_FILES) <= loaded and RULE_FILES, (globs, RULE_FILES)
    assert not any(p in loaded for p in TEST_FILES), "unit tests must not load as rules"
    dockerfile = (PROMETHEUS / "Dockerfile").read_text()
    assert "COPY rules/ /etc/prometheus/rules/" in dockerfile
    compose = yaml.safe_load((REPO / "deploy" / "docker-compose.yml").read_text())
    volumes = compose["services"]["prometheus"].get("volumes", [])
    assert "./prometheus/rules:/etc/prometheus/rules:ro" in volumes


def test_every_alert_has_a_unit_test_that_fires_it():
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in TEST_FILES:
        doc = yaml.safe_load(path.read_text())
        assert {(path.parent / f).resolve() for f in doc["rule_files"]} == {
            p.resolve() for p in RULE_FILES
        }
        for case in doc["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r["alert"] for r in alert_rules()}
    assert names <= fired, f"alerts no test fires: {sorted(names - fired)}"
    assert names <= quiet, f"alerts no test shows quiet: {sorted(names - quiet)}"


@needs_promtool
def test_promtool_check_rules():
    done = _promtool("check", "rules", *map(str, RULE_FILES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@needs_promtool
def test_promtool_check_config_finds_the_rules():
    done = _promtool("check", "config", str(PROMETHEUS / "prometheus.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in done.stdout + done.stderr


@needs_promtool
def test_promtool_test_rules():
    done = _promtool("test", "rules", *map(str, TEST_FILES))
    assert done.returncode == 0, done.stdout + done.stderr
