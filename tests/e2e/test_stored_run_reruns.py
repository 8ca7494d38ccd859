"""A stored run reruns byte for byte from its own config.yaml after a default has moved.

The run records every parameter of its policy, every setting and what made it (config.yaml's
provenance block). Here a default of `adaptive` moves, for every process of the second and
third runs (a `sitecustomize` on their PYTHONPATH, so the services started as processes see
it too): a fresh run then differs, and the stored run's config reruns it as it was."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

RUN = ("--workload", "femnist", "--sites", "10", "--max-rounds", "4", "--seed", "3")
COMPARED = ("rounds.csv", "decisions.jsonl")
#: the moved default: round 1 takes 3 sites instead of max(2, 5 % of 10)
MOVED = "Adaptive.Params = Adaptive.Params.with_defaults(k0=3)"


def powertrip(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "powertrip.app.cli", *args, "--quiet"],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def moved_default(tmp_path: Path) -> dict:
    """The environment of a process tree in which adaptive's k0 default is 3."""
    patch = tmp_path / "patch"
    patch.mkdir()
    (patch / "sitecustomize.py").write_text(
        textwrap.dedent(f"""\
            from powertrip.core.policies.adaptive import Adaptive
            {MOVED}
        """)
    )
    paths = [str(patch), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def test_a_stored_run_reruns_byte_identical_after_a_default_moved(tmp_path):
    stored = tmp_path / "stored"
    powertrip("run", "--policy", "adaptive", *RUN, "--out", str(stored))
    config = yaml.safe_load((stored / "config.yaml").read_text())
    assert config["policy_params"]["k0"] == 0.0  # every parameter, as it ran (unset as 0)
    made_by = config["provenance"]
    assert made_by["cpu_kernels"] == "pinned" and made_by["powertrip_version"]
    assert "commit" in made_by and "torch" in made_by

    env = moved_default(tmp_path)
    fresh = tmp_path / "fresh"
    powertrip("run", "--policy", "adaptive", *RUN, "--out", str(fresh), env=env)
    assert yaml.safe_load((fresh / "config.yaml").read_text())["policy_params"]["k0"] == 3.0
    assert (fresh / "rounds.csv").read_bytes() != (stored / "rounds.csv").read_bytes()

    again = tmp_path / "again"
    powertrip("run", "--config", str(stored / "config.yaml"), "--out", str(again), env=env)
    for name in COMPARED:
        assert (again / name).read_bytes() == (stored / name).read_bytes(), name
