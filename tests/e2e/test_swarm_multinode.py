"""The Docker Swarm stack across three nodes, one of which is lost mid-run.

test_swarm_stack.py runs deploy/swarm/stack.yml on a one-node swarm; an operator's swarm
has several hosts, and what has to be trusted is what happens between them. Here the nodes
are Docker-in-Docker containers on this host (deploy/swarm/dind-node.sh: each its own
dockerd, no --privileged), on one user-defined network:

1. the node image (debootstrap + `docker import`, cached by a content tag) and the
   powertrip images as the compose tests build them; 3 nodes started, the images loaded
   into each (`docker save | docker load`; for vfs first flattened to one layer each,
   cached by image id, so a node stores them once, not once per layer);
2. `swarm init` on the manager (labelled powertrip.aggregator=true: aggregator, profiler,
   policy, and the aggregator's run directory, a host directory mounted into it), two
   workers joined (labelled powertrip.gpu=true: the site workers, one per node);
3. `docker stack deploy` of stack.yml + multinode.yml from this host's CLI through the
   manager's socket: a small FEMNIST run (real training) over shaped links, mutual TLS,
   the join token; the links are checked as measured;
4. mid-round, `docker stop` of the worker node holding a site: the manager marks it down,
   its site-worker task is rescheduled on the other worker, claims the same site and
   trains again; the times are printed. Then the aggregator's task is killed: swarm
   restarts it on the manager (the only node it may run on, and the one holding its run
   directory), and it resumes from its checkpoint. Then the join token is rotated: a new
   swarm secret, `service update --secret-rm/--secret-add` of the aggregator and the site
   workers, every site delivering again under the new token, the old secret removed;
5. the run completes: every round once and in order, each round's accepted deltas counted
   once (`bytes_up`), and the final model bit-identical to the FedAvg replay of the
   accepted deltas (services/aggregator/audit.py);
6. everything removed in any case (nodes, network, host directories): this host's own
   engine is never put into swarm mode.

Runs with POWERTRIP_DOCKER_TESTS=1 (tests/conftest.py); skipped with the reason when the
node image cannot be built or a nested dockerd cannot start. Inner daemons use overlay2
where it works (much faster than vfs, which copies an image per container), else vfs;
POWERTRIP_DIND_STORAGE=vfs forces vfs. The nodes, the images loaded into them and the
reading of the swarm are in swarm_nodes.py.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator

import pytest

from services.aggregator.audit import verify
from tests.e2e.swarm_nodes import (
    WORKERS,
    Cluster,
    Phases,
    _build_images,
    _flat,
    _form_swarm,
    _interrupt,
    _parallel,
    _pipe,
    _running,
    _save_logs,
    _service_logs,
    _start_nodes,
    _tasks,
)
from tests.e2e.test_compose import (
    _PROBLEM,
    DEPLOY,
    _run,
    _wait,
    last_round,
    make_certs,
    run_decisions,
    stack_env,
)
from tests.e2e.test_swarm_stack import (
    IMAGE_UID,
    STACK_FILE,
    finished_run,
    logs_with_links,
    shaped_on_overlay,
)

OVERRIDE_FILE = DEPLOY / "swarm" / "multinode.yml"
SITES = int(os.environ.get("POWERTRIP_MULTINODE_SITES", "2"))  # one per worker node
ROUNDS = int(os.environ.get("POWERTRIP_MULTINODE_ROUNDS", "18"))
DEADLINE_S = "45"  # a round waits this long for a lost node's site
TAG = "e2e-multinode"
#: free space the nodes need under /tmp: overlay2 used ~5 GB here, vfs peaked at 25 GB
#: (2.4 GB per container of the trainer image: one copy for its init layer, one for its own)
MIN_FREE_GB = 30

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]
if _PROBLEM:
    pytestmark.append(pytest.mark.skip(reason=_PROBLEM))


@pytest.fixture(scope="module")
def multinode() -> Iterator[dict]:
    free_gb = shutil.disk_usage(tempfile.gettempdir()).free / 2**30
    if free_gb < MIN_FREE_GB:
        pytest.skip(f"{free_gb:.0f} GB free under {tempfile.gettempdir()}: the nodes' "
                    f"engines need ~{MIN_FREE_GB}")  # fmt: skip
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed: no certificates")
    phases = Phases()
    prefix = f"ptmn{os.getpid()}"
    cluster = Cluster(prefix)
    # Ctrl-C: pytest still finalizes the fixture; a SIGTERM (a CI timeout) is made one;
    # atexit covers an interpreter leaving any other way
    atexit.register(cluster.close)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    stack = "powertrip"
    runs = cluster.dir / "runs"
    runs.mkdir()
    if os.geteuid() == 0:  # the aggregator writes here as the images' user
        os.chown(runs, IMAGE_UID, IMAGE_UID)
    else:
        runs.chmod(0o777)
    secrets = cluster.dir / "secrets"
    state: dict = {"passed": False}
    try:
        env = stack_env(
            runs,
            "multinode",
            POWERTRIP_TAG=TAG,
            POWERTRIP_SITES=str(SITES),
            POWERTRIP_WORKLOAD="femnist",
            POWERTRIP_POLICY="all",
            POWERTRIP_MAX_ROUNDS=str(ROUNDS),
            POWERTRIP_ROUND_DEADLINE_S=DEADLINE_S,
            # 0.25-1 Gbit/s x 0.1 = 25-100 Mbit/s: FEMNIST's 26 MB each way in 2-8.5 s
            POWERTRIP_LINK_BANDWIDTH_SCALE="0.1",
            POWERTRIP_AUDIT_DIR="/app/runs/multinode-audit",
            POWERTRIP_SECRETS_DIR=str(secrets),
            POWERTRIP_RUNS=str(runs),
            POWERTRIP_AGGREGATOR_PORT="50051",
            POWERTRIP_PROFILER_PORT="50052",
        )
        node_image = _build_images(env, prefix)
        phases.done(f"images built ({node_image})")

        _start_nodes(cluster, runs)
        phases.done(f"3 nodes started ({cluster.storage})")
        services_image, trainer_image = f"powertrip-services:{TAG}", f"powertrip-trainer:{TAG}"
        if cluster.storage == "vfs":  # vfs stores each layer as a full copy: one layer each
            services_image, trainer_image = _flat(services_image), _flat(trainer_image)
            phases.done(f"images flattened for vfs ({services_image}, {trainer_image})")
        env.update(POWERTRIP_SERVICES_IMAGE=services_image, POWERTRIP_TRAINER_IMAGE=trainer_image)
        # the manager runs both images (one stream: shared layers once), the workers the trainer
        loads = {"manager": [services_image, trainer_image]}
        loads.update({w: [trainer_image] for w in WORKERS})
        _parallel({
            f"load {' '.join(images)} into {role}": (lambda r=role, i=images: _pipe(
                ["docker", "save", *i], ["docker", "-H", cluster.sock(r), "load"]))
            for role, images in loads.items()
        })  # fmt: skip
        phases.done("images loaded into the nodes")
        _form_swarm(cluster)
        phases.done("swarm formed")

        make_certs(secrets, f"IP:{cluster.ips['manager']}")
        detach = ["--detach=true"] if "--detach" in _run(
            ["docker", "stack", "deploy", "--help"]).stdout else []  # fmt: skip
        _run(["docker", "-H", cluster.sock("manager"), "stack", "deploy", *detach,
              "--resolve-image", "never", "-c", str(STACK_FILE), "-c", str(OVERRIDE_FILE),
              stack], env=env, timeout=300)  # fmt: skip
        phases.done("stack deployed")
        state.update(cluster=cluster, stack=stack, out=runs / "multinode", phases=phases,
                     audit=runs / "multinode-audit", secrets=secrets)  # fmt: skip
        yield state
    finally:
        if cluster.ips.get("manager") and not state["passed"]:
            _save_logs(cluster, stack)
        t_clean = time.monotonic()
        cluster.close()
        signal.signal(signal.SIGTERM, previous)
        print(f"[multinode] cleanup: {time.monotonic() - t_clean:.0f} s")
        print(f"[multinode] phases: {phases.report()}")


def test_swarm_across_three_nodes_survives_a_lost_node(multinode):
    cluster, stack, out = multinode["cluster"], multinode["stack"], multinode["out"]
    phases, figures = multinode["phases"], {}

    # 1. the sites registered, one site worker on each worker node, nothing on the manager
    _wait("round 1", lambda: last_round(out) >= 1, 600, every_s=1)
    phases.done("round 1 done")
    tasks = _tasks(cluster, stack, "site-worker")
    assert len(tasks) == SITES, tasks
    assert {t["node"] for t in tasks} == {cluster.name(w) for w in WORKERS}, tasks
    for service in ("aggregator", "profiler", "policy"):
        placed = {t["node"] for t in _tasks(cluster, stack, service)}
        assert placed == {cluster.name("manager")}, (service, placed)
    figures["placement"] = ", ".join(f"{t['slot']} on {t['node']}" for t in tasks)

    # links shaped on the overlay (eth0) and measured across nodes near their configuration
    site_logs = logs_with_links(lambda: _service_logs(cluster, stack, "site-worker"), SITES)
    figures["links"] = shaped_on_overlay(site_logs, SITES)

    # 2. stop worker1's node just after a round starts (its site is then mid-round)
    _wait("round 2", lambda: last_round(out) >= 2, 600, every_s=1)
    _running(out)
    lost, kept = cluster.name(WORKERS[0]), cluster.name(WORKERS[1])
    lost_slots = {t["slot"] for t in _tasks(cluster, stack, "site-worker") if t["node"] == lost}
    assert lost_slots, tasks
    before = last_round(out)
    _wait("the next round to start", lambda: last_round(out) > before, 300, every_s=0.05)
    r_stop = last_round(out)
    time.sleep(1.0)
    t_stop = time.monotonic()
    _run(["docker", "stop", lost], timeout=120)
    t_stopped = time.monotonic()
    marks: dict[str, float] = {}
    deadline = t_stop + 600
    back = None
    while time.monotonic() < deadline:
        now = time.monotonic()
        state = cluster.docker("manager", "node", "inspect", "-f", "{{.Status.State}}", lost,
                               check=False)  # fmt: skip
        if state == "down":
            marks.setdefault("node down", now)
        tasks = _tasks(cluster, stack, "site-worker")
        moved = [t for t in tasks if t["slot"] in lost_slots and t["node"] == kept
                 and t["state"].startswith("Running")]  # fmt: skip
        if len(moved) == len(lost_slots):
            marks.setdefault("replacement task running", now)
        if last_round(out) > r_stop:
            marks.setdefault(f"round {r_stop + 1} (the interrupted one) done", now)
        back = next((d for d in run_decisions(out) if d["round"] > r_stop + 1
                     and not d["failed_sites"] and d["k"] == SITES), None)  # fmt: skip
        if back:
            marks.setdefault(f"all {SITES} sites delivered (round {back['round']})", now)
            break
        _running(out)
        time.sleep(0.5)
    assert back, f"the lost node's sites never delivered again; seen: {marks}, tasks: {tasks}"
    assert all(t["node"] == kept for t in _tasks(cluster, stack, "site-worker")), tasks
    figures["node lost"] = (
        f"`docker stop {lost}` 1 s into round {r_stop + 1} (returned after "
        f"{t_stopped - t_stop:.1f} s); "
        + "; ".join(
            f"{k} +{v - t_stop:.1f} s" for k, v in sorted(marks.items(), key=lambda kv: kv[1])
        )
    )
    phases.done("node lost and recovered")

    # 3. kill the aggregator's task: restarted on the manager (the node with its run
    # directory), it resumes from the checkpoint and every worker rejoins
    _running(out)
    manager = "manager"
    label = f"label=com.docker.swarm.service.name={stack}_aggregator"
    old = cluster.docker(manager, "ps", "-q", "--filter", label).split()
    assert len(old) == 1, old
    r_kill = last_round(out)
    t_kill = time.monotonic()
    cluster.docker(manager, "kill", old[0])
    nxt = _wait(
        "a round recorded by the replacement aggregator",
        lambda: next((d for d in run_decisions(out) if d["round"] > r_kill), None),
        600, every_s=0.5,
    )  # fmt: skip
    t_next = time.monotonic()
    placed = _tasks(cluster, stack, "aggregator")
    assert [t["node"] for t in placed] == [cluster.name("manager")], placed
    assert "resumed from the checkpoint" in _service_logs(cluster, stack, "aggregator")
    figures["aggregator task killed"] = (
        f"after round {r_kill}; replacement on {placed[0]['node']} (pinned: it holds the run "
        f"directory) recorded round {nxt['round']} {t_next - t_kill:.1f} s after the kill"
    )
    phases.done("aggregator killed and resumed")

    # 4. rotate the join token while the run goes on: a new swarm secret, swapped in under
    # the same target with `service update --secret-rm/--secret-add` (the aggregator first:
    # it restarts and resumes; then the site workers, which rejoin with the new token)
    _running(out)
    rotated = f"{stack}_join_token_2"
    token_file = multinode["secrets"] / "join-token-2"
    token_file.write_text(os.urandom(32).hex() + "\n")
    cluster.docker(manager, "secret", "create", rotated, str(token_file))
    r_rot = last_round(out)
    resumed = _service_logs(cluster, stack, "aggregator").count("resumed from the checkpoint")
    t_rot = time.monotonic()
    for service, owner in (("aggregator", ",uid=65532,gid=65532"), ("site-worker", "")):
        cluster.docker(manager, "service", "update", "--detach", "--secret-rm",
                       f"{stack}_join_token", "--secret-add",
                       f"source={rotated},target=join-token{owner},mode=0400",
                       f"{stack}_{service}")  # fmt: skip
    t_updated = time.monotonic()
    full = _wait(
        f"all {SITES} sites delivering under the new token",
        lambda: _running(out) or next((d for d in run_decisions(out) if d["round"] > r_rot + 1
                                       and not d["failed_sites"] and d["k"] == SITES), None),
        600, every_s=0.5,
    )  # fmt: skip
    t_full = time.monotonic()
    for service in ("aggregator", "site-worker"):
        names = cluster.docker(manager, "service", "inspect", "-f",
                               "{{range .Spec.TaskTemplate.ContainerSpec.Secrets}}"
                               "{{.SecretName}} {{end}}", f"{stack}_{service}").split()  # fmt: skip
        assert rotated in names and f"{stack}_join_token" not in names, (service, names)
    after = _service_logs(cluster, stack, "aggregator").count("resumed from the checkpoint")
    assert after > resumed, "the aggregator was not restarted with the new secret"
    # nothing uses the old token any more: it can go
    cluster.docker(manager, "secret", "rm", f"{stack}_join_token")
    figures["join token rotated"] = (
        f"after round {r_rot} (both updates issued in {t_updated - t_rot:.1f} s); all "
        f"{SITES} sites delivered with the new token in round {full['round']}, "
        f"{t_full - t_rot:.1f} s after the rotation began; old secret removed"
    )
    phases.done("join token rotated")

    # 5. the run completes, every round once, every accepted update counted once
    _rows, decisions, _clean = finished_run(out, ROUNDS)
    figures["audit"] = verify(multinode["audit"], out)
    assert list(out.parent.glob("multinode.finished-*")) == []  # resumed, not a new run
    figures["rounds with a failed site"] = (
        ", ".join(f"{d['round']}: {d['failed_sites']}" for d in decisions if d["failed_sites"])
        or "none"
    )
    phases.done("run finished and audited")
    for key, value in figures.items():
        print(f"[multinode] {key}: {value}")
    multinode["passed"] = True
