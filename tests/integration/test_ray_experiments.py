"""`powertrip sweep|compare --ray ADDRESS` on a real two-node Ray cluster on this host: a
head and a second node started with `ray start`, one CPU each, so two runs at once must use
both. Each run's rounds.csv and decisions.jsonl are byte-identical to the same command
without Ray; a second --ray invocation reuses the finished runs; the time each path took is
printed (the overhead Ray adds per run on this host)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="--ray needs the ray extra: pip install -e '.[ray]'")

from powertrip.app.experiments.launcher import free_port  # noqa: E402
from tests.reliability.procs import REPO  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
RAY = str(Path(sys.executable).with_name("ray"))
COMMON = ["--workload", "synthetic", "--sites", "10", "--max-rounds", "3", "--seed", "2",
          "--train-threads", "1", "--quiet"]  # fmt: skip
COMPARED = ("rounds.csv", "decisions.jsonl")


def _ray(*args: str, env: dict[str, str]) -> None:
    done = subprocess.run([RAY, *args], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head and a second node (its own resources), stopped with everything they started."""
    # Ray runs its workers at nice 15 by default: on a node busy with anything else the runs
    # would crawl, which is Ray's choice for a shared node, not a measure of PowerTrip's
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_worker_niceness": "0"}
    temp = tmp_path_factory.mktemp("ray")
    port = free_port()
    _ray("start", "--head", "--port", str(port), "--num-cpus", "1", "--include-dashboard=false",
         "--disable-usage-stats", "--temp-dir", str(temp), env=env)  # fmt: skip
    try:
        address = f"127.0.0.1:{port}"
        _ray("start", "--address", address, "--num-cpus", "1", "--resources",
             '{"second_node": 1}', env=env)  # fmt: skip
        yield address
    finally:
        subprocess.run([RAY, "stop", "--force"], capture_output=True, timeout=120, env=env)


def _powertrip(*args: str) -> tuple[str, float]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "powertrip", *args],
        capture_output=True, text=True, timeout=600, cwd=REPO,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, time.monotonic() - start


def _same_runs(local: Path, remote: Path, names: list[str]) -> None:
    for name in names:
        for file in COMPARED:
            a, b = (local / name / file).read_bytes(), (remote / name / file).read_bytes()
            assert a == b, f"{name}/{file} differs with --ray"


def test_a_sweep_on_two_ray_nodes_gives_the_local_sweeps_runs(tmp_path, cluster):
    sweep = ["sweep", *COMMON, "--k", "2,4"]
    _, local_s = _powertrip(*sweep, "--out", str(tmp_path / "local"))
    out, ray_s = _powertrip(*sweep, "--out", str(tmp_path / "ray"), "--ray", cluster)
    assert "2 run(s) submitted to the Ray cluster" in out
    _same_runs(tmp_path / "local", tmp_path / "ray", ["k2", "k4"])
    print(f"\nsweep of 2 runs: {local_s:.1f} s locally, {ray_s:.1f} s on Ray (2 nodes)")
    # the checkpoint stays on the node; the run's own files and logs come back
    assert not (tmp_path / "ray" / "k2" / "checkpoint").exists()
    assert (tmp_path / "ray" / "k2" / "logs" / "aggregator.log").is_file()
    again, _ = _powertrip(*sweep, "--out", str(tmp_path / "ray"), "--ray", cluster)
    assert again.count("already finished") == 2 and "submitted" not in again


def test_a_compare_on_ray_gives_the_local_compares_runs(tmp_path, cluster):
    compare = ["compare", *COMMON, "--policies", "powertrip,random,static:k=3",
               "--budget-factor", "0"]  # fmt: skip
    _powertrip(*compare, "--out", str(tmp_path / "local"))
    out, _ = _powertrip(*compare, "--out", str(tmp_path / "ray"), "--ray", cluster)
    assert out.count("submitted to the Ray cluster") == 2  # the first policy, then the rest
    _same_runs(tmp_path / "local", tmp_path / "ray", ["powertrip", "random", "static-k3"])


def test_reproduce_on_ray_gives_the_local_reproduces_runs(tmp_path, cluster):
    """Figs. 8 and 10 at --quick on two seeds: a group per seed, each a task making its runs
    on one profiler + policy, PowerTrip first and the others cut off as locally."""
    reproduce = ["reproduce", "--figure", "8,10", "--quick", "--workload", "synthetic",
                 "--seeds", "2", "--k", "2,5", "--no-refine", "--quiet", "--set",
                 "train_threads=1"]  # fmt: skip
    _powertrip(*reproduce, "--out", str(tmp_path / "local"))
    out, _ = _powertrip(*reproduce, "--out", str(tmp_path / "ray"), "--ray", cluster)
    assert "2 group(s) submitted to the Ray cluster" in out
    for seed in (0, 1):
        group = f"runs/uniform/seed{seed}"
        _same_runs(tmp_path / "local" / group, tmp_path / "ray" / group,
                   ["powertrip", "static-k2", "static-k5"])  # fmt: skip
    assert (tmp_path / "ray" / "fig8" / "report.html").is_file()
    again, _ = _powertrip(*reproduce, "--out", str(tmp_path / "ray"), "--ray", cluster)
    assert "submitted" not in again and "ran 0" in again


def test_an_unfinished_run_is_made_again_on_the_cluster(tmp_path, cluster):
    """A run directory left without a summary (a local run killed mid-way) is replaced:
    its checkpoint cannot follow the run to another node."""
    sweep = ["sweep", *COMMON, "--k", "3"]
    _powertrip(*sweep, "--out", str(tmp_path / "local"))
    shutil.copytree(tmp_path / "local", tmp_path / "ray")
    (tmp_path / "ray" / "k3" / "summary.json").unlink()
    out, _ = _powertrip(*sweep, "--out", str(tmp_path / "ray"), "--ray", cluster)
    assert "making it again on the cluster" in out
    _same_runs(tmp_path / "local", tmp_path / "ray", ["k3"])


def test_a_bad_address_is_a_clear_error(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "powertrip", "sweep", *COMMON, "--k", "2", "--out",
         str(tmp_path / "x"), "--ray", f"127.0.0.1:{free_port()}"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "--ray 127.0.0.1:" in done.stderr and "cannot join the Ray cluster" in done.stderr


def _ray_services() -> list[str]:
    """Command lines of services started by a Ray task (they run in its scratch dir)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "-m services." in cmd and "powertrip-ray-" in cmd:
            found.append(cmd)
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_cancels_the_tasks_and_leaves_nothing_running(tmp_path, cluster, signum):
    cli = subprocess.Popen(
        [sys.executable, "-m", "powertrip", "sweep", *COMMON[:4], "--max-rounds", "500",
         *COMMON[6:], "--k", "2,4", "--out", str(tmp_path / "ray"), "--ray", cluster],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not _ray_services() and time.monotonic() < deadline:
        assert cli.poll() is None, cli.communicate()
        time.sleep(0.5)
    assert _ray_services(), "no task started its services"
    cli.send_signal(signum)
    out, err = cli.communicate(timeout=120)
    assert cli.returncode == 128 + signum, out[-2000:] + err[-2000:]
    assert "the Ray tasks were cancelled" in err
    deadline = time.monotonic() + 30
    while _ray_services() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _ray_services()
