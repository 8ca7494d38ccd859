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


#: ports Ray's components bind by default on every node (dashboard agent, client server,
#: dashboard, GCS): a head started on one of them fails ("used by other components")
RAY_FIXED_PORTS = frozenset({52365, 10001, 8265, 6379})


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
    while port in RAY_FIXED_PORTS:  # an ephemeral port may be one Ray's own components take
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


def test_gpus_that_no_node_has_are_refused_at_once(tmp_path, cluster):
    """This cluster's nodes have no GPU: --ray-gpus 1 is a clear error (exit 2), not tasks
    that wait for a GPU for ever."""
    done = subprocess.run(
        [sys.executable, "-m", "powertrip", "sweep", *COMMON, "--k", "2", "--out",
         str(tmp_path / "x"), "--ray", cluster, "--ray-gpus", "1"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "--ray-gpus 1: no node of the Ray cluster" in done.stderr
    assert "the most on one node: 0" in done.stderr


def _processes(*marks: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process whose command line holds all of `marks`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if proc.name.isdigit() and all(mark in cmd for mark in marks):
            found.append((int(proc.name), cmd))
    return found


def _ray_services() -> list[str]:
    """Command lines of services started by a Ray task (they run in its scratch dir)."""
    return [cmd for _, cmd in _processes("-m services.", "powertrip-ray-")]


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


# `powertrip run --ray`: one run, its site workers as Ray actors on the cluster's nodes

RUN = ["run", "--workload", "synthetic", "--sites", "10", "--seed", "2", "--train-threads", "1",
       "--workers", "2", "--quiet"]  # fmt: skip


def _ray_workers() -> list[int]:
    """Pids of site workers started by a Ray actor (their token file is in its scratch)."""
    return [pid for pid, _ in _processes("-m services.site_worker", "powertrip-worker-")]


def _start_long_run(tmp_path: Path, cluster: str) -> subprocess.Popen:
    """A run that goes on until stopped; returned once both its Ray workers run and it has
    recorded a round."""
    cli = subprocess.Popen(
        [sys.executable, "-m", "powertrip", *RUN, "--max-rounds", "5000", "--target-accuracy",
         "1.0", "--out", str(tmp_path / "long"), "--ray", cluster],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while len(_ray_workers()) < 2 and time.monotonic() < deadline:
        assert cli.poll() is None, cli.communicate()
        time.sleep(0.5)
    assert len(_ray_workers()) == 2, "the two Ray workers did not start"
    rounds = tmp_path / "long" / "rounds.csv"  # under way: a round recorded
    while (not rounds.is_file() or len(rounds.read_text().splitlines()) < 2) and (
        time.monotonic() < deadline
    ):
        assert cli.poll() is None, cli.communicate()
        time.sleep(0.5)
    return cli


def _nothing_left() -> None:
    deadline = time.monotonic() + 30
    while _ray_workers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _ray_workers(), "a site worker outlived the run"


def test_a_run_with_its_workers_on_two_ray_nodes_matches_the_local_run(tmp_path, cluster):
    run = [*RUN, "--max-rounds", "4"]
    _, local_s = _powertrip(*run, "--out", str(tmp_path / "local"))
    out, ray_s = _powertrip(*run, "--out", str(tmp_path / "ray"), "--ray", cluster)
    # one CPU per node and a CPU per worker: the two actors must be on the two nodes
    assert "2 Ray actor(s) on 2 node(s)" in out, out
    for file in COMPARED:
        assert (tmp_path / "local" / file).read_bytes() == (tmp_path / "ray" / file).read_bytes()
    for w in (0, 1):
        log = (tmp_path / "ray" / "logs" / f"site_worker:{w}.log").read_text()
        assert log.startswith("# site worker on Ray node") and "run finished" in log
    print(f"\nrun with 2 workers: {local_s:.1f} s locally, {ray_s:.1f} s with Ray workers")
    _nothing_left()


def test_a_signal_stops_a_run_and_its_ray_workers(tmp_path, cluster):
    cli = _start_long_run(tmp_path, cluster)
    cli.send_signal(signal.SIGTERM)
    out, err = cli.communicate(timeout=120)
    assert cli.returncode == 143, out[-2000:] + err[-2000:]
    assert "site_worker:0" in err and "site_worker:1" in err and "--resume" in err
    _nothing_left()


def test_a_lost_worker_actor_ends_the_run_with_a_clear_message(tmp_path, cluster):
    """The actor's process killed (as when its node dies): its worker follows it
    (PR_SET_PDEATHSIG) and the run ends (exit 3) naming the worker and why."""
    cli = _start_long_run(tmp_path, cluster)
    worker = _ray_workers()[0]
    actor = int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(actor, signal.SIGKILL)
    out, err = cli.communicate(timeout=120)
    assert cli.returncode == 3, out[-2000:] + err[-2000:]
    assert "its Ray actor was lost" in err and "site_worker:" in err
    _nothing_left()
