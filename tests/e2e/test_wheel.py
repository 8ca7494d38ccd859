"""A wheel of powertrip, installed as a Flower user installs it: `make wheel` builds it, and
a fresh venv in a temporary directory, with no repository on its path, installs it with
the `flower` extra (the versions of constraints.txt). From outside the checkout the installed
package runs a synthetic run, a FEMNIST run on the subset the wheel carries, a run over the
region catalog it carries, and the minimal Flower app (`flwr run` against the venv's own
SuperLink); the one data set it does not carry (the speech clips) is refused with where to
get them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.flower_link import run_minimal, superlink

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]


#: the environment the venv's commands run in: no checkout on the path, no other venv
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def run(cmd: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_wheel_installs_outside_the_checkout_and_runs(tmp_path):
    dist = tmp_path / "dist"
    run(["make", "wheel", f"WHEEL_DIR={dist}"], cwd=REPO)
    [wheel] = dist.glob("powertrip-*-py3-none-any.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    pip, python = venv / "bin" / "pip", venv / "bin" / "python"
    run([str(pip), "install", "-q", "-c", str(REPO / "constraints.txt"), f"{wheel}[flower]"],
        cwd=tmp_path, timeout=1200)  # fmt: skip
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = run([str(python), "-c", "import powertrip; print(powertrip.__file__)"], outside)
    assert where.stdout.strip().startswith(str(venv))  # the installed copy, not the checkout
    cli = str(venv / "bin" / "powertrip")
    for name, args in {
        "synthetic": ["--workload", "synthetic", "--sites", "6", "--max-rounds", "2"],
        "femnist": ["--sites", "10", "--max-rounds", "1", "--policy", "static", "--param", "k=2"],
        "regions": ["--set", "population=regions", "--sites", "8", "--max-rounds", "1"],
    }.items():
        run([cli, "run", *args, "--out", str(outside / name), "--quiet"], outside)
        assert (outside / name / "rounds.csv").read_text().count("\n") >= 2, name
    # the minimal Flower app, a copy of the repository's, run from there by `flwr run`
    # against a SuperLink of the venv's
    shutil.copytree(REPO / "examples" / "flower" / "minimal", outside / "minimal")
    with superlink(tmp_path / "link", bin_dir=venv / "bin", env=ENV) as link:
        decided = run_minimal(link, outside / "minimal", outside / "flower", cwd=outside)
    assert [d["round"] for d in decided] == [1, 2, 3, 4, 5]
    speech = subprocess.run(
        [cli, "run", "--workload", "speech", "--sites", "4", "--out", str(outside / "sp")],
        cwd=outside, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert speech.returncode == 2 and "data/speech_commands" in speech.stderr
