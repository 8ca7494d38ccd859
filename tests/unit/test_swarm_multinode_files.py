"""Static checks of what the multi-node swarm test deploys with (deploy/swarm/multinode.yml,
deploy/swarm/dind-node.sh), so a broken file shows up without a Docker engine; the swarm
running for real: tests/e2e/test_swarm_multinode.py."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from tests.unit.test_deploy_files import DEPLOY

STACK = DEPLOY / "swarm" / "stack.yml"
OVERRIDE = DEPLOY / "swarm" / "multinode.yml"
NODE_SCRIPT = DEPLOY / "swarm" / "dind-node.sh"


def test_override_keeps_the_policy_beside_the_aggregator():
    """Losing a site-worker node must lose site workers only: the services without a
    placement in stack.yml are pinned to the aggregator's node by the override."""
    stack = yaml.safe_load(STACK.read_text())["services"]
    override = yaml.safe_load(OVERRIDE.read_text())
    assert override["version"] == yaml.safe_load(STACK.read_text())["version"]
    assert set(override["services"]) <= set(stack)
    aggregator = stack["aggregator"]["deploy"]["placement"]["constraints"]
    for name, service in stack.items():
        merged = override["services"].get(name, {}).get("deploy", {}).get("placement") or (
            service["deploy"].get("placement")
        )
        assert merged, f"{name} has no placement on a multi-node swarm"
        if name != "site-worker":
            assert merged["constraints"] == aggregator, name
    assert stack["site-worker"]["deploy"]["placement"]["constraints"] != aggregator


def test_node_script_parses_and_never_asks_for_privileged():
    text = NODE_SCRIPT.read_text()
    assert "--privileged" not in re.sub(r"#.*", "", text)  # refused on these hosts
    assert "--cap-drop SYS_RESOURCE" in text
    done = subprocess.run(["bash", "-n", str(NODE_SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_node_image_tag_depends_only_on_what_goes_into_it():
    """The test reuses a built node image by its tag: the tag must not change with the
    script's comments or its `start` command, only with the suite and the packages."""
    tag = subprocess.run(["bash", str(NODE_SCRIPT), "tag"], capture_output=True, text=True)
    assert tag.returncode == 0, tag.stderr
    assert re.fullmatch(r"powertrip-dind-node:[0-9a-f]{12}\n", tag.stdout), tag.stdout
    env = {"PATH": "/usr/bin:/bin", "POWERTRIP_DIND_SUITE": "trixie"}
    other = subprocess.run(
        ["bash", str(NODE_SCRIPT), "tag"], capture_output=True, text=True, env=env
    )
    assert other.stdout != tag.stdout


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_node_script_is_shellcheck_clean():
    done = subprocess.run(["shellcheck", str(NODE_SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
