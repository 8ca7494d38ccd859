"""The three-node Docker Swarm of test_swarm_multinode.py: Docker-in-Docker nodes on one
network (deploy/swarm/dind-node.sh), driven from this host's CLI through each node's
socket; the images built and loaded into them, the swarm formed, and the swarm read back
(tasks, service logs). Everything is removed by Cluster.close, whatever happened."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.test_compose import DEPLOY, _compose, _run, _wait, last_round

NODE_SCRIPT = DEPLOY / "swarm" / "dind-node.sh"
WORKERS = ("worker1", "worker2")


class Cluster:
    """Three nodes on one network, driven from this host's CLI through each node's socket;
    `close` removes every node, the network and the host directory (idempotent)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.network = f"{prefix}-net"
        self.dir = Path(tempfile.mkdtemp(prefix="powertrip-multinode-"))
        self.nodes: list[str] = []
        self.ips: dict[str, str] = {}
        self.storage = ""
        self.closed = False

    def name(self, role: str) -> str:
        return f"{self.prefix}-{role}"

    def sock(self, role: str) -> str:
        return f"unix://{self.dir / role / 'sock' / 'docker.sock'}"

    def docker(self, role: str, *args: str, check: bool = True, timeout: float = 300,
               env: dict[str, str] | None = None) -> str:  # fmt: skip
        """The docker CLI against one node's own engine."""
        done = _run(["docker", "-H", self.sock(role), *args], env=env, check=check,
                    timeout=timeout)  # fmt: skip
        return done.stdout.strip()

    def start(self, role: str, index: int, storage: str, *extra: str) -> str | None:
        """Start a node; None when up, else the reason (its dockerd's last log lines)."""
        self.nodes.append(self.name(role))
        done = subprocess.run(
            ["bash", str(NODE_SCRIPT), "start", self.name(role), self.network,
             f"10.210.{index}.1/24", str(self.dir / role), *extra],
            capture_output=True, text=True, timeout=180,
            env={**os.environ, "POWERTRIP_DIND_STORAGE": storage},
        )  # fmt: skip
        if done.returncode != 0:
            return (done.stderr or done.stdout).strip()[-1500:]
        address = f'{{{{(index .NetworkSettings.Networks "{self.network}").IPAddress}}}}'
        inspect = _run(["docker", "inspect", "-f", address, self.name(role)])
        self.ips[role] = inspect.stdout.strip()
        return None

    def remove_node(self, role: str) -> None:
        _run(["docker", "rm", "-f", "-v", self.name(role)], check=False, timeout=300)
        shutil.rmtree(self.dir / role, ignore_errors=True)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for node in self.nodes:
            _run(["docker", "rm", "-f", "-v", node], check=False, timeout=300)
        _run(["docker", "network", "rm", self.network], check=False, timeout=60)
        # the nodes' image stores are ~100k small files each: unlink them side by side
        removals = [subprocess.Popen(["rm", "-rf", str(path)]) for path in self.dir.iterdir()]
        for removal in removals:
            removal.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _flat(image: str) -> str:
    """The image as one layer (docker export | docker import, its config kept), tagged by
    the source image's id so it is made once: vfs stores every layer as a full copy."""
    image_id = _run(["docker", "image", "inspect", "-f", "{{.Id}}", image]).stdout.strip()
    repo = image.split(":")[0]
    flat = f"{repo}-flat:{image_id.split(':')[-1][:12]}"
    if _run(["docker", "image", "inspect", flat], check=False).returncode == 0:
        return flat
    config = json.loads(
        _run(["docker", "image", "inspect", "-f", "{{json .Config}}", image]).stdout
    )
    changes = [f"ENV {e}" for e in config.get("Env") or []]
    if config.get("WorkingDir"):
        changes.append(f"WORKDIR {config['WorkingDir']}")
    if config.get("User"):
        changes.append(f"USER {config['User']}")
    if config.get("Entrypoint"):
        changes.append(f"ENTRYPOINT {json.dumps(config['Entrypoint'])}")
    if config.get("Cmd"):
        changes.append(f"CMD {json.dumps(config['Cmd'])}")
    container = _run(["docker", "create", image]).stdout.strip()
    try:
        args = [a for c in changes for a in ("--change", c)]
        _pipe(["docker", "export", container], ["docker", "import", *args, "-", flat])
    finally:
        _run(["docker", "rm", "-f", container], check=False)
    # one flat copy per image is enough: drop those of older builds (~1.2 GB each)
    stale = _run(["docker", "images", "-q", "--filter", f"reference={repo}-flat"]).stdout.split()
    keep = _run(["docker", "image", "inspect", "-f", "{{.Id}}", flat]).stdout.strip()
    for old in {i for i in stale if not keep.split(":")[-1].startswith(i)}:
        _run(["docker", "rmi", "-f", old], check=False)
    return flat


def _pipe(left: list[str], right: list[str], timeout: float = 900) -> None:
    """`left | right`, failing with either side's error."""
    producer = subprocess.Popen(left, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        done = subprocess.run(right, stdin=producer.stdout, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
    finally:
        producer.stdout.close()
        producer.wait(timeout=60)
    if producer.returncode or done.returncode:
        raise AssertionError(
            f"{' '.join(left)} | {' '.join(right)}: {producer.stderr.read().decode()[-1500:]} "
            f"{done.stderr[-1500:]}"
        )


def _parallel(jobs: dict[str, Callable[[], object]]) -> None:
    """Run the jobs in threads; raise the first failure (by name)."""
    errors: dict[str, BaseException] = {}

    def run(name: str, job: Callable[[], object]) -> None:
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 - reported below, with the job's name
            errors[name] = exc

    threads = [threading.Thread(target=run, args=item) for item in jobs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        name, exc = next(iter(errors.items()))
        raise AssertionError(f"{name}: {exc}") from exc


class Phases:
    """Wall-clock phase timings, printed at the end whatever happened."""

    def __init__(self) -> None:
        self.t0 = self.last = time.monotonic()
        self.times: dict[str, float] = {}

    def done(self, phase: str) -> None:
        now = time.monotonic()
        self.times[phase] = now - self.last
        self.last = now
        print(f"[multinode] {phase}: {self.times[phase]:.0f} s", flush=True)

    def report(self) -> str:
        parts = [f"{k} {v:.0f} s" for k, v in self.times.items()]
        return "; ".join([*parts, f"total {time.monotonic() - self.t0:.0f} s"])


def _build_images(env: dict[str, str], project: str) -> str:
    """The node image, and the services and trainer images (tag TAG); skips when the node
    image cannot be built here (no debootstrap, not root, no Debian mirror)."""
    built = subprocess.run(["bash", str(NODE_SCRIPT), "build"], capture_output=True, text=True,
                           timeout=900)  # fmt: skip
    if built.returncode != 0:
        pytest.skip(f"no swarm-node image: deploy/swarm/dind-node.sh build: "
                    f"{built.stderr.strip()[-500:]}")  # fmt: skip
    node_image = built.stdout.strip().splitlines()[-1]
    _run([str(DEPLOY / "wheelhouse.sh")], env=env, timeout=600)
    compose = [*_compose(), "-p", project, "-f", str(DEPLOY / "docker-compose.yml")]
    _run([*compose, "build", "policy", "aggregator"], env=env, timeout=900)
    return node_image


def _start_nodes(cluster: Cluster, runs: Path) -> None:
    """The network and 3 nodes; overlay2 inside them when it works (unless told vfs), else
    vfs; skips with the dockerd's own words when no nested daemon starts."""
    _run(["docker", "network", "create", "--label", "powertrip.dind-node=1", cluster.network])
    wanted = os.environ.get("POWERTRIP_DIND_STORAGE", "overlay2")
    # the manager holds the aggregator's run directory (the same path inside as here)
    why = cluster.start("manager", 1, wanted, "-v", f"{runs}:{runs}")
    if why and wanted != "vfs":
        print(f"[multinode] {wanted} in a nested dockerd failed, using vfs: {why[-300:]}")
        cluster.remove_node("manager")
        cluster.nodes.remove(cluster.name("manager"))
        wanted = "vfs"
        why = cluster.start("manager", 1, wanted, "-v", f"{runs}:{runs}")
    if why:
        pytest.skip(f"a nested dockerd (no --privileged) does not start here: {why}")
    cluster.storage = wanted
    for index, role in enumerate(WORKERS, start=2):
        why = cluster.start(role, index, wanted)
        assert why is None, f"{role}: {why}"


def _form_swarm(cluster: Cluster) -> None:
    manager_ip = cluster.ips["manager"]
    cluster.docker("manager", "swarm", "init", "--advertise-addr", manager_ip)
    token = cluster.docker("manager", "swarm", "join-token", "-q", "worker")
    for role in WORKERS:
        cluster.docker(role, "swarm", "join", "--advertise-addr", cluster.ips[role],
                       "--token", token, f"{manager_ip}:2377")  # fmt: skip
    ready = ["Ready"] * 3
    _wait("3 nodes ready", lambda: cluster.docker(
        "manager", "node", "ls", "--format", "{{.Status}}").split() == ready, 120, 1)  # fmt: skip
    cluster.docker("manager", "node", "update", "--label-add", "powertrip.aggregator=true",
                   cluster.name("manager"))  # fmt: skip
    for role in WORKERS:
        cluster.docker("manager", "node", "update", "--label-add", "powertrip.gpu=true",
                       cluster.name(role))  # fmt: skip


def _interrupt(signum: int, _frame: object) -> None:
    """SIGTERM as Ctrl-C, so pytest still runs the fixture's cleanup."""
    raise KeyboardInterrupt(f"signal {signum}")


def _save_logs(cluster: Cluster, stack: str) -> None:
    """After a failure, every service's log tail through the manager, into the pytest
    output (the host directory goes with the cluster)."""
    for service in ("aggregator", "profiler", "policy", "site-worker"):
        done = _run(["docker", "-H", cluster.sock("manager"), "service", "logs", "--raw",
                     "--timestamps", f"{stack}_{service}"], check=False, timeout=60)  # fmt: skip
        text = (done.stdout + done.stderr).strip().splitlines()
        print(f"==== {service} (last 40 lines)\n" + "\n".join(text[-40:]))


# ---- reading the swarm --------------------------------------------------------------------


def _tasks(cluster: Cluster, stack: str, service: str) -> list[dict[str, str]]:
    """The tasks swarm wants running: slot name, node, current state."""
    out = cluster.docker("manager", "service", "ps", f"{stack}_{service}", "--filter",
                         "desired-state=running", "--format",
                         "{{.Name}}\t{{.Node}}\t{{.CurrentState}}", check=False)  # fmt: skip
    rows = [line.split("\t") for line in out.splitlines() if line.count("\t") == 2]
    return [{"slot": s, "node": n, "state": st} for s, n, st in rows]


def _service_logs(cluster: Cluster, stack: str, service: str) -> str:
    done = _run(["docker", "-H", cluster.sock("manager"), "service", "logs", "--raw",
                 f"{stack}_{service}"], check=False, timeout=60)  # fmt: skip
    return done.stdout + done.stderr


def _running(out: Path) -> None:
    assert not (out / "summary.json").exists(), (
        f"the run finished ({last_round(out)} rounds) before the fault was injected and "
        "recovered from: raise POWERTRIP_MULTINODE_ROUNDS"
    )
