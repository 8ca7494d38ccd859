"""Runs as Ray tasks: `powertrip sweep|compare --ray ADDRESS`.

Each run is independent (its own aggregator, site workers, profiler and policy, as
`powertrip run` starts them), so a cluster can make many at once. A task makes its run in a
scratch directory on whichever node Ray places it and sends the run's files back
(`RUN_FILES`: everything but the checkpoint), which the driver writes where the local
command would have: the same run directories, reused by the next command as today. So no
shared filesystem is needed; every node needs this package, the same version, and its data
(`data/` of the checkout, or POWERTRIP_DATA_DIR), as Ray's own workers need their code.

* Resources: a run asks for `cpus_of(config)` CPUs (its site-worker threads, at least one),
  so Ray never packs more runs on a node than it has cores for, and `--ray-gpus` GPUs
  (0 by default; a request no node can meet is refused at once).
* Failures: a task whose run fails is retried once (`MAX_RETRIES`, also after a lost node);
  a second failure is reported with the last lines of its aggregator log.
* Ctrl-C (or SIGTERM): the driver cancels the tasks it submitted; each task stops its run's
  processes on the way out (the same `stop_services` as a local run), so none is left.
* What crosses to a task is plain text and bytes (the settings as YAML, the run's files);
  Ray itself moves task arguments and results with pickle between its processes, so the
  cluster is a trusted one, as Ray's security notes require (no Ray port open to others).
* Ray is the optional extra `[ray]` and is imported only here, only when --ray is given.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from powertrip.app.experiments.runner import RunError
from powertrip.core.config import ConfigError, RunConfig

EXTRA_HINT = "install the ray extra: pip install -e '.[ray]' (or make setup)"
#: a failed run is tried once more before it is reported
MAX_RETRIES = 1
#: run-directory entries not sent back: the checkpoint is for resuming on the node that made
#: the run, and a finished run is never resumed
SKIPPED = frozenset({"checkpoint"})
#: seconds a cluster address gets to accept a TCP connection
CONNECT_TIMEOUT_S = 5.0
#: seconds between looks at the submitted tasks
POLL_S = 0.5
#: lines of the aggregator log a failure report carries
LOG_TAIL_LINES = 30


class RayRunError(RunError):
    """A run failed on the cluster twice; the message carries its log's tail. A RunError,
    so the CLI reports it as it reports a run that failed locally (exit 1)."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(f"--ray needs Ray: {EXTRA_HINT}") from exc
    return ray


@contextmanager
def connected(address: str, gpus: float = 0.0) -> Iterator[Any]:
    """ray.init on `address` ('auto': the cluster this machine belongs to; host:port; or
    ray://host:10001 for Ray Client), shut down on the way out. `gpus` (what each task or
    actor will ask for) must fit on one of its nodes, or it is a ConfigError now rather
    than tasks that wait for ever."""
    ray = import_ray()
    check_reachable(address)
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # no FutureWarning
    # Ray's core worker installs a handler that dumps a stack and dies on SIGTERM; ours
    # (the CLI's) turns it into the same clean stop as Ctrl-C, tasks cancelled
    on_term = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"--ray {address}: cannot join the Ray cluster: {exc}") from None
    finally:
        if on_term is not None:
            signal.signal(signal.SIGTERM, on_term)
    try:
        check_gpus(ray, address, gpus)
        yield ray
    finally:
        ray.shutdown()


def check_gpus(ray: Any, address: str, gpus: float) -> None:
    """A GPU request (`--ray-gpus`) that no live node of the cluster can meet is refused."""
    if gpus < 0:
        raise ConfigError(f"--ray-gpus must be >= 0, got {gpus:g}")
    if gpus == 0:
        return
    most = max(
        (node["Resources"].get("GPU", 0.0) for node in ray.nodes() if node.get("Alive")),
        default=0.0,
    )
    if most < gpus:
        raise ConfigError(
            f"--ray-gpus {gpus:g}: no node of the Ray cluster at {address} has that many "
            f"GPUs (the most on one node: {most:g}); start its nodes with `ray start "
            "--num-gpus N` on GPU machines, or leave --ray-gpus out"
        )


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A HOST:PORT (or ray://HOST:PORT) that accepts no TCP connection is a ConfigError now:
    ray.init would retry it for minutes. 'auto' is left to Ray, which fails at once when
    this machine joined no cluster."""
    target = address.removeprefix("ray://")
    if address == "auto" or ":" not in target:
        return
    host, _, port = target.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"--ray {address}: cannot join the Ray cluster: nothing answers at {target} "
            f"({exc}); start one with `ray start --head` or give its address"
        ) from None


def cpus_of(config: RunConfig) -> int:
    """CPUs a run keeps busy: every worker's training threads (0 = one per core, counted as
    one: Ray then places runs one per CPU and each uses what is free)."""
    return max(1, config.workers * max(1, config.train_threads))


def resources_of(config: RunConfig, gpus: float = 0.0) -> dict[str, float]:
    """What a run's task asks Ray for: its CPUs and `--ray-gpus` GPUs. Ray then sets
    CUDA_VISIBLE_DEVICES to the GPUs it gave, and the run's site workers (device auto)
    train on them."""
    return {"num_cpus": cpus_of(config), "num_gpus": gpus}


@dataclass
class RunRequest:
    """What a task needs: the run's settings (as YAML text, read back on the node) and the
    base config its profiler reads."""

    name: str
    config_yaml: str
    base_yaml: str
    label: str = ""


def config_text(config: RunConfig) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False)


def read_back(text: str, name: str) -> RunConfig:
    return RunConfig.from_mapping(yaml.safe_load(text) or {}, source=f"{name} (sent by --ray)")


def make_run(request: RunRequest) -> dict[str, bytes]:
    """The task body: the run in a scratch directory, its files as {relative path: bytes}.
    Raises RayRunError with the aggregator log's tail when the run fails."""
    from powertrip.app.experiments.launcher import Deployment
    from powertrip.app.experiments.runner import run_once

    config = read_back(request.config_yaml, request.name)
    with tempfile.TemporaryDirectory(prefix="powertrip-ray-") as scratch:
        root = Path(scratch)
        (root / "base-config.yaml").write_text(request.base_yaml)
        run_dir = root / "run"
        try:
            with Deployment(root / "base-config.yaml", root / "logs") as deployment:
                run_once(config, run_dir, deployment, label=request.label, show_progress=False)
        except RunError as exc:
            raise RayRunError(f"{request.name}: {exc}\n{_log_tail(run_dir)}") from None
        return collect(run_dir)


def collect(run_dir: Path) -> dict[str, bytes]:
    """Every file under run_dir but SKIPPED entries, by path relative to it."""
    found = {}
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir)
        if path.is_file() and rel.parts[0] not in SKIPPED:
            found[rel.as_posix()] = path.read_bytes()
    return found


def write_back(files: dict[str, bytes], run_dir: Path) -> None:
    """The task's files into run_dir; a path that would leave it is refused."""
    root = run_dir.resolve()
    for rel, data in files.items():
        target = (run_dir / rel).resolve()
        if root not in target.parents:
            raise RayRunError(f"a task sent a file outside its run directory: {rel!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _log_tail(run_dir: Path) -> str:
    log = run_dir / "logs" / "aggregator.log"
    try:
        lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return "(no aggregator log)"
    return "aggregator log, last lines:\n" + "\n".join(lines)


@dataclass
class Submitted:
    request: RunRequest
    run_dir: Path
    config: RunConfig


def run_all(
    ray: Any,
    jobs: Sequence[Submitted],
    on_done: Callable[[Submitted, dict[str, Any]], None],
    gpus: float = 0.0,
) -> None:
    """Submit every job at once, write each run's files back as it finishes and call
    on_done with its summary. Ctrl-C cancels what is still running, then re-raises."""

    def landed(job: Submitted, files: dict[str, bytes]) -> None:
        write_back(files, job.run_dir)
        on_done(job, json.loads((job.run_dir / "summary.json").read_text()))

    tasks = [(job.request, resources_of(job.config, gpus), job.request.name, job) for job in jobs]
    submit_and_drain(ray, make_run, tasks, landed)


def submit_and_drain(
    ray: Any,
    body: Callable[[Any], Any],
    tasks: Sequence[tuple[Any, dict[str, float], str, Any]],
    landed: Callable[[Any, Any], None],
) -> None:
    """Submit `body(request)` for each (request, resources, name, item) at once and hand each
    result to landed(item, result) as it comes. A task that fails MAX_RETRIES + 1 times ends
    the drain with a RayRunError naming it; an error or a signal here cancels the rest."""
    task = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=True)(body)
    pending = {
        task.options(**resources, name=f"powertrip:{name}").remote(request): (name, item)
        for request, resources, name, item in tasks
    }
    try:
        while pending:
            # polled, with the wait in Python: a signal that arrives inside ray.wait comes
            # out as a bare KeyboardInterrupt, losing which signal it was (SIGTERM: 143)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0)
            if not ready:
                time.sleep(POLL_S)
                continue
            name, item = pending.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if isinstance(exc.cause, RayRunError) else exc
                raise RayRunError(
                    f"{name} failed {MAX_RETRIES + 1} times on the cluster: {cause}"
                ) from None
            landed(item, result)
    except BaseException:
        for ref in pending:
            ray.cancel(ref)  # not force: the task's finally blocks stop its processes
        raise
