"""The Docker Swarm stack for real: `docker stack deploy -c deploy/swarm/stack.yml` on a
single-node swarm made here, with the same locally built images as the compose tests.

What runs, in order, as docs/deploy.md ("Docker Swarm", "Running a site worker on a remote
GPU VM") says to do it:

1. `docker swarm init` (unless this engine is already a swarm manager: then it is used and
   left as it is), the node labelled powertrip.aggregator=true and powertrip.gpu=true;
   certificates and a join token from `JOIN_TOKEN=1 deploy/tls/make-certs.sh`, deployed as
   swarm secrets; a run of 4 sites in total with 2 local site-worker replicas (shaped links,
   mutual TLS, the token), so the run waits for the other two;
2. `docker service scale STACK_site-worker=3`: the third replica claims a site;
3. a "remote" worker outside the stack: `powertrip site-bundle` for the fourth site, then the
   bundle's own `docker-run.sh`, dialling the published ports over mutual TLS; the run starts;
4. a site-worker task is killed (`docker kill` of its container: swarm replaces the task, the
   replacement has the same slot hostname and claims the same site), then the aggregator's
   task (the replacement resumes from its checkpoint in the run directory; every worker,
   the remote one included, rejoins);
5. the run completes: every round once and in order, each round's accepted deltas counted
   exactly once (`bytes_up`), the checkpoint's model version = rounds, and the final model
   bit-identical to the FedAvg replay of the accepted deltas (services/aggregator/audit.py);
6. `docker stack rm`, nothing of the stack left, the node's labels restored and, when this
   test made the swarm, `docker swarm leave --force`.

Skipped, with the reason, without a Docker engine, openssl, or a node that can be a swarm
manager.  No IPVS in this kernel (dockerd: "ipvs is not enabled"), so the stack uses
dnsrr endpoints and host-mode published ports (docs/deploy.md says why).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import grpc
import pytest

from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from services.aggregator.audit import verify
from tests.e2e.test_compose import (
    _PROBLEM,
    DEPLOY,
    _compose,
    _run,
    _wait,
    bridge_address,
    check_dashboard_series,
    last_round,
    make_certs,
    make_site_bundle,
    run_decisions,
    run_rows,
    stack_env,
)

STACK_FILE = DEPLOY / "swarm" / "stack.yml"
#: Prometheus (and Grafana, 0 replicas here: its image comes from Docker Hub) in the same stack
MONITORING_FILE = DEPLOY / "swarm" / "monitoring.yml"
SITES = 4  # in total: 2 replicas, then 3 after `docker service scale`, plus 1 remote
LOCAL_FIRST, LOCAL_SCALED = 2, 3
ROUNDS = int(os.environ.get("POWERTRIP_SWARM_ROUNDS", "40"))
# paces a round at ~1-3 s here, so the two kills land mid-run (the test says so if not)
LOCAL_STEPS = os.environ.get("POWERTRIP_SWARM_LOCAL_STEPS", "3000")
DEADLINE_S = "20"
TAG = "e2e-swarm"
LABELS = {"powertrip.aggregator": "true", "powertrip.gpu": "true"}

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1500)]


def _swarm_problem() -> str | None:
    if _PROBLEM:
        return _PROBLEM
    if shutil.which("openssl") is None:
        return "openssl not installed: no certificates"
    info = subprocess.run(
        ["docker", "info", "-f", "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    state = info.stdout.split()
    if info.returncode != 0 or not state:
        return f"docker info: {info.stderr.strip()[-300:]}"
    if state[0] == "active" and state[1:] != ["true"]:
        return "this engine is a swarm worker, not a manager: cannot deploy a stack"
    if state[0] not in ("inactive", "active"):
        return f"swarm state {state[0]!r}: neither free nor a working swarm"
    return None


_SKIP = _swarm_problem()
if _SKIP:
    pytestmark.append(pytest.mark.skip(reason=_SKIP))


def _docker(*args: str, check: bool = True, timeout: float = 300) -> str:
    return _run(["docker", *args], check=check, timeout=timeout).stdout.strip()


def _free_port() -> int:
    """A port free now on this host: the stack publishes on fixed ports, so a replaced
    aggregator task is found where the remote worker's bundle says."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _swarm():
    """A swarm manager for the test: the engine's own if it has one, else one made here and
    left afterwards; the node's powertrip labels set for the test and restored after."""
    state = _docker("info", "-f", "{{.Swarm.LocalNodeState}}")
    had_gwbridge = bool(_docker("network", "ls", "-q", "--filter", "name=^docker_gwbridge$"))
    made = state == "inactive"
    if made:
        _docker("swarm", "init", "--advertise-addr", "127.0.0.1")
    node = _docker("info", "-f", "{{.Swarm.NodeID}}")
    before = json.loads(_docker("node", "inspect", node, "-f", "{{json .Spec.Labels}}") or "{}")
    before = before or {}
    try:
        adds = [a for k, v in LABELS.items() for a in ("--label-add", f"{k}={v}")]
        _docker("node", "update", *adds, node)
        yield {"node": node, "made": made}
    finally:
        if made:
            _docker("swarm", "leave", "--force", check=False)
            if not had_gwbridge:  # `swarm init` made it; nothing else uses it now
                _docker("network", "rm", "docker_gwbridge", check=False)
            after = _docker("info", "-f", "{{.Swarm.LocalNodeState}}")
            assert after == "inactive", f"the swarm was not left: {after}"
        else:
            args = []
            for key in LABELS:
                args += ["--label-add", f"{key}={before[key]}"] if key in before else [
                    "--label-rm", key]  # fmt: skip
            _docker("node", "update", *args, node, check=False)


def _leftovers(stack: str) -> list[str]:
    label = f"label=com.docker.stack.namespace={stack}"
    found = []
    for kind in (["ps", "-aq"], ["service", "ls", "-q"], ["network", "ls", "-q"],
                 ["secret", "ls", "-q"]):  # fmt: skip
        found += _docker(*kind, "--filter", label, check=False).split()
    return found


def _save_logs(stack: str, services: list[str], path: Path) -> None:
    parts = []
    for service in services:
        logs = _run(["docker", "service", "logs", "--raw", "--timestamps", f"{stack}_{service}"],
                    check=False, timeout=120)  # fmt: skip
        parts.append(f"==== {service}\n{logs.stdout}{logs.stderr}")
    path.write_text("\n".join(parts))
    print(f"swarm logs: {path}")


def _remove_stack(stack: str) -> None:
    _docker("stack", "rm", stack, check=False)
    _wait(f"stack {stack} removed", lambda: not _leftovers(stack), 120, every_s=1)
    # `stack rm` keeps named volumes: Prometheus' series
    _docker("volume", "rm", f"{stack}_prometheus-data", check=False)


#: the user the images run as (deploy/Dockerfile's USER)
IMAGE_UID = 65532


@pytest.fixture(scope="module")
def swarm_stack():
    stack = f"ptswarm{os.getpid()}"
    runs = Path(tempfile.mkdtemp(prefix="powertrip-swarm-"))
    # the aggregator runs as the images' uid 65532 and writes its run here (a host directory)
    if os.geteuid() == 0:
        os.chown(runs, IMAGE_UID, IMAGE_UID)
    else:
        runs.chmod(0o777)
    secrets = runs / "secrets"
    bridge = bridge_address()
    agg_port, prof_port, prom_port = _free_port(), _free_port(), _free_port()
    env = stack_env(
        runs,
        "swarm",
        POWERTRIP_TAG=TAG,
        POWERTRIP_SITES=str(SITES),
        POWERTRIP_LOCAL_SITES=str(LOCAL_FIRST),
        POWERTRIP_POLICY="all",
        POWERTRIP_MAX_ROUNDS=str(ROUNDS),
        POWERTRIP_ROUND_DEADLINE_S=DEADLINE_S,
        POWERTRIP_LOCAL_STEPS=LOCAL_STEPS,
        POWERTRIP_AUDIT_DIR="/app/runs/swarm-audit",
        POWERTRIP_SECRETS_DIR=str(secrets),
        POWERTRIP_RUNS=str(runs),
        POWERTRIP_SERVICES_IMAGE=f"powertrip-services:{TAG}",
        POWERTRIP_TRAINER_IMAGE=f"powertrip-trainer:{TAG}",
        POWERTRIP_AGGREGATOR_PORT=str(agg_port),
        POWERTRIP_PROFILER_PORT=str(prof_port),
        POWERTRIP_PROMETHEUS_IMAGE=f"powertrip-prometheus:{TAG}",
        POWERTRIP_PROMETHEUS_PORT=str(prom_port),
        POWERTRIP_GRAFANA_PORT=str(_free_port()),
        POWERTRIP_GRAFANA_REPLICAS="0",
    )
    # the images: the compose file's build, as the other e2e tests make them (cached layers)
    _run([str(DEPLOY / "wheelhouse.sh")], env=env, timeout=600)
    compose = [*_compose(), "-p", stack, "-f", str(DEPLOY / "docker-compose.yml")]
    _run([*compose, "build", "policy", "aggregator", "prometheus"], env=env, timeout=900)
    # the aggregator's certificate also names the address the remote worker dials
    make_certs(secrets, f"IP:{bridge}")
    (secrets / "grafana-admin-password").write_text(os.urandom(18).hex() + "\n")
    remote_name = f"{stack}-remote"
    detach = ["--detach=true"] if "--detach" in _docker("stack", "deploy", "--help") else []
    with _swarm() as swarm:
        try:
            _run(["docker", "stack", "deploy", *detach, "-c", str(STACK_FILE),
                  "-c", str(MONITORING_FILE), stack], env=env, timeout=300)  # fmt: skip
            yield {
                "stack": stack, "env": env, "runs": runs, "out": runs / "swarm",
                "audit": runs / "swarm-audit", "secrets": secrets, "bridge": bridge,
                "agg_port": agg_port, "prof_port": prof_port, "swarm": swarm,
                "prom": f"http://127.0.0.1:{prom_port}",
                "remote": remote_name, "remote_container": f"powertrip-{remote_name}",
            }  # fmt: skip
        finally:
            if _leftovers(stack):  # the test failed before its own teardown
                _save_logs(stack, ["aggregator", "profiler", "policy", "site-worker"],
                           runs / "swarm.log")  # fmt: skip
            _docker("rm", "-f", f"powertrip-{remote_name}", check=False)
            _remove_stack(stack)


# ---- reading the run --------------------------------------------------------------------


def _running(out: Path) -> None:
    assert not (out / "summary.json").exists(), (
        f"the run finished ({last_round(out)} rounds) before every fault was injected: "
        "raise POWERTRIP_SWARM_ROUNDS or POWERTRIP_SWARM_LOCAL_STEPS"
    )


def _status(stack: dict) -> aggregator_pb2.RunStatus | None:
    """The aggregator's RunStatus over its published port (mutual TLS, a client cert)."""
    secrets = stack["secrets"]
    creds = grpc.ssl_channel_credentials(
        (secrets / "ca.crt").read_bytes(),
        (secrets / "client.key").read_bytes(),
        (secrets / "client.crt").read_bytes(),
    )
    with grpc.secure_channel(f"127.0.0.1:{stack['agg_port']}", creds) as channel:
        try:
            return aggregator_pb2_grpc.AggregatorStub(channel).GetStatus(
                aggregator_pb2.GetStatusRequest(), timeout=5
            )
        except grpc.RpcError:
            return None


def _registered(stack: dict, n: int) -> bool:
    status = _status(stack)
    return status is not None and status.registered_sites >= n


def _tasks(stack: str, service: str) -> list[str]:
    """The running containers of a service, on this node."""
    label = f"label=com.docker.swarm.service.name={stack}_{service}"
    return _docker("ps", "-q", "--filter", label).split()


def _service_logs(stack: str, service: str) -> str:
    done = _run(["docker", "service", "logs", "--raw", f"{stack}_{service}"], check=False)
    return done.stdout + done.stderr


LINK = re.compile(
    r"(site-\d+): link one-way ([\d.]+) ms measured \(([\d.]+) configured\), "
    r"([\d.]+) MB/s measured \(([\d.]+) configured\)"
)


def logs_with_links(read_logs, sites: int, timeout_s: float = 120) -> str:
    """The site workers' logs once they hold `sites` sites' link measurements: `docker
    service logs` lags behind the tasks (a run in CI read none of a registered site's lines
    right after it registered), so a single read can come back empty."""

    def measured() -> str | None:
        logs = read_logs()
        return logs if len({s for s, *_ in LINK.findall(logs)}) >= sites else None

    try:
        return _wait(f"{sites} sites' link lines in the site workers' logs", measured, timeout_s)
    except AssertionError:
        return read_logs()  # shaped_on_overlay then says what is missing


def shaped_on_overlay(logs: str, sites: int) -> str:
    """Check from the site workers' logs that each of `sites` sites shaped its link on the
    overlay interface (eth0) and measured it within 25 % of its configuration; returns
    the measured/configured figures."""
    shaped = re.findall(r"(site-\d+): shaped (\S+) \(mode (\w+)\)", logs)
    assert {iface for _, iface, _ in shaped} == {"eth0"}, shaped
    links = LINK.findall(logs)
    assert len({s for s, *_ in links}) == sites, logs[-3000:]
    for site, lat_m, lat_c, bw_m, bw_c in links:
        assert abs(float(bw_m) - float(bw_c)) <= 0.25 * float(bw_c), (site, bw_m, bw_c)
        assert abs(float(lat_m) - float(lat_c)) <= 0.25 * float(lat_c) + 3, (site, lat_m, lat_c)
    return "; ".join(
        f"{s} {bm}/{bc} MB/s, one-way {lm}/{lc} ms (measured/configured)"
        for s, lm, lc, bm, bc in links
    )


def finished_run(out: Path, rounds: int) -> tuple[list[dict], list[dict], list[dict]]:
    """Wait for the run's summary, then check what a run that lost tasks must still hold:
    every round once and in order, each round's accepted deltas counted once (`bytes_up`),
    the checkpoint at the last round. Returns rounds.csv's rows, the decisions and the rows
    of rounds without a failed site."""
    summary_path = out / "summary.json"
    summary = _wait("summary.json", lambda: summary_path.exists() and json.loads(
        summary_path.read_text()), 900, every_s=2)  # fmt: skip
    assert summary["status"] == "done", summary
    rows, decisions = run_rows(out), run_decisions(out)
    assert [int(r["round"]) for r in rows] == list(range(1, rounds + 1)), rows
    assert [d["round"] for d in decisions] == list(range(1, rounds + 1))
    clean = [r for r, d in zip(rows, decisions, strict=True) if not d["failed_sites"]]
    model_bytes = int(clean[0]["bytes_down"]) // int(clean[0]["k"])
    # deltas cross as int8, the deployment's default: about a quarter of the model's bytes
    delta_bytes = int(clean[0]["bytes_up"]) // int(clean[0]["k"])
    assert delta_bytes < model_bytes / 3, (delta_bytes, model_bytes)
    for row, d in zip(rows, decisions, strict=True):
        accepted = int(row["k"]) - len(d["failed_sites"])
        assert accepted >= 1 and int(row["bytes_up"]) == accepted * delta_bytes, (row, d)
    final = json.loads((out / "checkpoint" / "state.json").read_text())
    assert final["round"] == rounds and final["model_version"] == rounds, final
    return rows, decisions, clean


def test_swarm_stack_scales_takes_a_remote_site_and_survives_killed_tasks(swarm_stack):
    stack, name, out = swarm_stack, swarm_stack["stack"], swarm_stack["out"]
    t0 = time.monotonic()
    figures: dict[str, str] = {}

    # 1. two local replicas register; the run of 4 sites waits for the rest
    _wait("2 local sites registered", lambda: _registered(stack, LOCAL_FIRST), 420, every_s=2)
    status = _status(stack)
    assert status.state == "waiting_for_sites" and status.num_sites == SITES, status
    figures["deploy"] = f"{LOCAL_FIRST} replicas registered {time.monotonic() - t0:.0f} s in"

    # their links are shaped on the overlay interface (the path to the aggregator), not the
    # default route's docker_gwbridge; an unshaped overlay would measure far above the rate
    site_logs = logs_with_links(lambda: _service_logs(name, "site-worker"), LOCAL_FIRST)
    figures["links"] = shaped_on_overlay(site_logs, LOCAL_FIRST)

    # 2. scale the site workers
    _docker("service", "scale", "--detach=true", f"{name}_site-worker={LOCAL_SCALED}")
    _wait("the scaled replica registered", lambda: _registered(stack, LOCAL_SCALED), 300, 2)

    # 3. the remote worker: a bundle for a free site, started by its own docker-run.sh
    bridge = stack["bridge"]
    run_sh = make_site_bundle(
        stack["secrets"], stack["runs"] / "bundle", f"{bridge}:{stack['agg_port']}",
        f"{bridge}:{stack['prof_port']}", stack["remote"], f"powertrip-trainer:{TAG}",
    )  # fmt: skip
    started = subprocess.run(["sh", str(run_sh)], capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    _wait("the remote site registered", lambda: _registered(stack, SITES), 300, every_s=2)
    logs = _run(["docker", "logs", stack["remote_container"]])
    remote_logs = logs.stdout + logs.stderr
    claimed = re.findall(r"claimed (site-\d+) from the profiler", remote_logs)
    assert claimed, remote_logs[-2000:]
    remote_site = claimed[0]
    figures["remote"] = f"{stack['remote']} claimed {remote_site} over mutual TLS"

    # 4a. kill a site-worker task just after a round starts
    _wait("round 2", lambda: last_round(out) >= 2, 600, every_s=1)
    _running(out)
    victim = _tasks(name, "site-worker")[0]
    hostname = _docker("inspect", "-f", "{{.Config.Hostname}}", victim)
    before = last_round(out)
    _wait("the next round to start", lambda: last_round(out) > before, 300, every_s=0.05)
    r_kill = last_round(out)
    time.sleep(0.4)
    t_kill = time.monotonic()
    _docker("kill", victim)
    replacement = _wait(
        "swarm to replace the killed task",
        lambda: [c for c in _tasks(name, "site-worker") if c != victim and _docker(
            "inspect", "-f", "{{.Config.Hostname}}", c) == hostname],
        300, every_s=1,
    )[0]  # fmt: skip
    t_up = time.monotonic()
    back = _wait(
        "all 4 sites delivering again",
        lambda: _running(out) or next((d for d in run_decisions(out) if d["round"] > r_kill + 1
                                       and not d["failed_sites"] and d["k"] == SITES), None),
        300, every_s=0.5,
    )  # fmt: skip
    figures["site-worker task"] = (
        f"docker kill of {hostname}'s task 0.4 s into round {r_kill + 1}; replacement "
        f"{replacement[:12]} running after {t_up - t_kill:.1f} s; all {SITES} sites delivered "
        f"in round {back['round']}, {time.monotonic() - t_kill:.1f} s after the kill"
    )

    # 4b. kill the aggregator's task
    _running(out)
    aggregator = _tasks(name, "aggregator")
    assert len(aggregator) == 1, aggregator
    checkpoint = json.loads((out / "checkpoint" / "state.json").read_text())
    r_kill = last_round(out)
    t_kill = time.monotonic()
    _docker("kill", aggregator[0])
    nxt = _wait(
        "a round recorded by the replacement aggregator",
        lambda: next((d for d in run_decisions(out) if d["round"] > r_kill), None),
        600, every_s=0.5,
    )  # fmt: skip
    new_tasks = _tasks(name, "aggregator")
    assert new_tasks and new_tasks[0] != aggregator[0], new_tasks
    figures["aggregator task"] = (
        f"docker kill after round {r_kill} (checkpoint of round {checkpoint['round']}); "
        f"round {nxt['round']} recorded {time.monotonic() - t_kill:.1f} s after the kill"
    )

    # 5. the run completes, with every accepted update counted once
    _rows, _decisions, clean = finished_run(out, ROUNDS)
    # the remote site trained in the rounds it was not cut off in
    assert sum(remote_site in r["sites"].split(";") for r in clean) >= ROUNDS // 2, clean[:3]
    figures["audit"] = verify(stack["audit"], out)
    assert list(out.parent.glob("swarm.finished-*")) == []  # resumed, not a new run

    # the remote worker left on its own once the run was done (exit 0: no restart)
    _wait(
        "the remote worker to exit",
        lambda: (
            _docker("inspect", "-f", "{{.State.Status}}", stack["remote_container"]) == "exited"
        ),
        120,
    )
    assert _docker("inspect", "-f", "{{.State.ExitCode}}", stack["remote_container"]) == "0"
    figures["total"] = f"{time.monotonic() - t0:.0f} s from deploy to the audit"
    for key, value in figures.items():
        print(f"{key}: {value}")

    # 5b. Prometheus in the stack (monitoring.yml) scraped every series the dashboard queries,
    # over the overlay by the stack's service names, certificate expiry included (TLS is on)
    check_dashboard_series(stack["prom"])

    # 6. tear down: nothing of the stack left (the fixture then restores the swarm)
    _save_logs(name, ["aggregator", "profiler", "policy", "site-worker"],
               stack["runs"] / "swarm.log")  # fmt: skip
    _docker("rm", "-f", stack["remote_container"])
    _remove_stack(name)
    assert _leftovers(name) == []
