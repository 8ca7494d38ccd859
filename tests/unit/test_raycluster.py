"""The parts of `--ray` that need no cluster (powertrip/app/experiments/raycluster.py): what
a task sends back, where the driver may write it, the CPUs a run asks for and the address
check; tests/integration/test_ray_experiments.py runs the real thing on two Ray nodes."""

from __future__ import annotations

import socket

import pytest

from powertrip.app.experiments import raycluster as R
from powertrip.core.config import ConfigError, RunConfig


def test_a_task_sends_the_run_files_but_not_the_checkpoint(tmp_path):
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "checkpoint").mkdir()
    (run / "rounds.csv").write_text("round\n1\n")
    (run / "logs" / "aggregator.log").write_text("log")
    (run / "checkpoint" / "model.safetensors").write_bytes(b"x" * 10)
    files = R.collect(run)
    assert files == {"logs/aggregator.log": b"log", "rounds.csv": b"round\n1\n"}
    R.write_back(files, tmp_path / "back")
    assert (tmp_path / "back" / "logs" / "aggregator.log").read_text() == "log"


@pytest.mark.parametrize("name", ["../escape.csv", "/etc/passwd", "logs/../../x"])
def test_the_driver_writes_nothing_outside_the_run_directory(tmp_path, name):
    with pytest.raises(R.RayRunError, match="outside its run directory"):
        R.write_back({name: b"x"}, tmp_path / "run")
    assert not (tmp_path / "escape.csv").exists() and not (tmp_path / "x").exists()


@pytest.mark.parametrize(("workers", "threads", "cpus"), [(1, 0, 1), (1, 1, 1), (2, 3, 6)])
def test_a_run_asks_for_a_cpu_per_training_thread(workers, threads, cpus):
    assert R.cpus_of(RunConfig(workers=workers, train_threads=threads)) == cpus


def test_an_address_that_nothing_answers_is_refused_at_once():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(ConfigError, match="cannot join the Ray cluster"):
            R.check_reachable(f"127.0.0.1:{port}", timeout_s=2)
        with pytest.raises(ConfigError, match=r"--ray ray://127\.0\.0\.1"):
            R.check_reachable(f"ray://127.0.0.1:{port}", timeout_s=2)


def test_an_address_that_answers_passes_and_auto_is_left_to_ray():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        R.check_reachable(f"127.0.0.1:{server.getsockname()[1]}", timeout_s=2)
    R.check_reachable("auto")


def test_the_settings_cross_as_yaml_and_come_back_equal():
    config = RunConfig(policy="static", policy_params={"k": 3.0}, num_sites=7, lr=0.01)
    back = R.read_back(R.config_text(config), "k3")
    assert back.to_dict() == config.to_dict()


def test_a_failed_task_is_reported_as_a_failed_run():
    """The CLI's RunError handling (exit 1, one line) covers a run that failed twice on the
    cluster, for sweep, compare and reproduce alike."""
    from powertrip.app.experiments.runner import RunError

    assert issubclass(R.RayRunError, RunError)


class _Cluster:
    """ray.nodes() of a cluster (the only part of Ray that check_gpus reads): a stand-in,
    since no node here has a GPU to show."""

    def __init__(self, *gpus: float, dead: float = 0.0):
        self._nodes = [{"Alive": True, "Resources": {"CPU": 4.0, "GPU": g}} for g in gpus]
        self._nodes.append({"Alive": False, "Resources": {"CPU": 4.0, "GPU": dead}})

    def nodes(self):
        return self._nodes


def test_a_gpu_request_no_live_node_can_meet_is_refused():
    R.check_gpus(_Cluster(), "auto", 0)  # no GPU asked: nothing to check
    R.check_gpus(_Cluster(1.0, 4.0), "auto", 4)
    R.check_gpus(_Cluster(1.0), "auto", 0.5)  # a fraction shares one
    with pytest.raises(ConfigError, match=r"--ray-gpus 2: no node .*the most on one node: 1\b"):
        R.check_gpus(_Cluster(1.0, 1.0), "auto", 2)  # two nodes of one GPU are not one of two
    with pytest.raises(ConfigError, match="the most on one node: 0"):
        R.check_gpus(_Cluster(dead=8.0), "auto", 1)  # a dead node's GPUs do not count
    with pytest.raises(ConfigError, match=">= 0"):
        R.check_gpus(_Cluster(1.0), "auto", -1)


def test_a_task_asks_for_its_cpus_and_the_gpus_given():
    config = RunConfig(workers=2, train_threads=2)
    assert R.resources_of(config) == {"num_cpus": 4, "num_gpus": 0.0}
    assert R.resources_of(config, 0.5) == {"num_cpus": 4, "num_gpus": 0.5}
