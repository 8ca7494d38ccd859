"""examples/flower/README.md, as a user runs it on Flower 1.42 (issue 61):

* its "Run it" block, taken from the README and run by bash as it stands: a SuperLink
  started by hand with its PID kept, 10 simulated SuperNodes, `flwr run` with the quoted
  `policy-params`, the stop by PID. PowerTrip must choose k < 10 of the 10 nodes, round 1
  among all 10, and decisions.jsonl must land in the run's own directory under `out-dir`;
* `minimal/`, the README's snippet made a Flower app: `flwr run` against a SuperLink of the
  test's own (tests/integration/flower_link.py), a real simulation (Ray) whose round 1 must
  see all `min_available_nodes` nodes.

Only FLWR_HOME (a private one), PATH (this Python's bin first) and the update check are
set around the README's commands; they run in a scratch directory that links to
`examples/`, so the run's files land there and not in the repository."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="Flower is not installed: pip install -e '.[flower]'")
pytest.importorskip("ray", reason="Flower's simulation engine needs Ray: '.[flower]'")

from powertrip.app.flower import read_decisions  # noqa: E402
from tests.integration.flower_link import run_minimal, superlink, wait_gone  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples/flower"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def run_it_block() -> str:
    """The README's first bash block after "## Run it"."""
    text = (EXAMPLE / "README.md").read_text()
    found = re.search(r"## Run it\n.*?```bash\n(.*?)```", text, re.S)
    assert found, "examples/flower/README.md has no bash block under '## Run it'"
    return found.group(1)


def test_the_readme_commands_run_as_written(tmp_path):
    bin_dir = Path(sys.executable).parent
    for tool in ("flwr", "flower-superlink"):
        if not (bin_dir / tool).exists():
            pytest.skip(f"no {tool} beside this Python")
    if shutil.which("curl") is None:
        pytest.skip("the README's block waits for the SuperLink with curl; none installed")
    try:  # the README's SuperLink takes Flower's fixed local port: a user's own is left be
        urllib.request.urlopen("http://127.0.0.1:39091/health", timeout=1)
        pytest.skip("a Flower SuperLink already answers on 127.0.0.1:39091")
    except OSError:
        pass
    (tmp_path / "examples").symlink_to(REPO / "examples")
    env = {
        **os.environ,
        "FLWR_HOME": str(tmp_path / "flwr-home"),
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
    }
    env.pop("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", None)  # the README does not set it
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", "-e", "-c", run_it_block()], capture_output=True, text=True,
            timeout=800, env=env, cwd=tmp_path,
        )  # fmt: skip
    finally:  # the block failed before its own stop: stop the SuperLink it started
        pid_file = tmp_path / "superlink.pid"
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
    log = done.stdout + done.stderr
    print(f"README block: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, log[-4000:]
    assert "(10 simulated SuperNodes)" in log, log[-4000:]
    assert not (tmp_path / "superlink.pid").exists()
    # its log went to runs/ (ignored by git), not the directory it was started in
    assert (tmp_path / "runs" / "superlink.log").exists()
    assert not (tmp_path / "superlink.log").exists()
    assert 'Recommended property "license"' not in log

    runs = sorted((tmp_path / "runs/flower").glob("run-*/decisions.jsonl"))
    assert len(runs) == 1, runs
    decided = read_decisions(runs[0])
    assert [d["round"] for d in decided] == [1, 2, 3]
    assert len(decided[0]["profiles"]) == 10  # round 1 chose among all 10 nodes
    assert all(1 <= d["k"] < 10 for d in decided)
    assert all(d["accuracy"] is not None and d["reason"] for d in decided)
    assert decided[0]["k"] == 2  # policy-params '{"k0": 2}' reached the policy
    for d in decided:
        line = (f"configure_train: PowerTrip powertrip chose k={d['k']} of 10 nodes, "
                f"predicted round time {d['predicted_round_time_s']:.1f} s (the policy's "
                f"paper estimate {d['policy_estimate_s']:.1f} s), outer step ")  # fmt: skip
        assert line in log
    assert "Traceback" not in log, log[-4000:]

    # the SuperLink the block started is gone (stopped by its PID), with its SuperExec
    left = wait_gone(tmp_path / "flwr-home", timeout_s=30)
    assert not left, f"processes of the README's SuperLink still run: {left}"


def test_the_minimal_app_runs_and_round_one_sees_every_node(tmp_path):
    started = time.monotonic()
    with superlink(tmp_path) as link:
        decided = run_minimal(link, EXAMPLE / "minimal", tmp_path / "out", cwd=tmp_path)
    took = time.monotonic() - started
    lines = len((EXAMPLE / "minimal" / "minimal_app.py").read_text().splitlines())
    print(f"minimal/minimal_app.py: {lines} lines, {took:.1f} s with its SuperLink")
    assert [d["round"] for d in decided] == [1, 2, 3, 4, 5]
    assert all(len(d["profiles"]) == 6 for d in decided)  # min_available_nodes=6
    assert len({p["site_id"] for p in decided[0]["profiles"]}) == 6  # a site id per node
    assert decided[0]["k"] < 6 and all(d["accuracy"] > 0.5 for d in decided)
