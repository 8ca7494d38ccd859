"""One run's site workers as Ray actors across a cluster: `powertrip run --ray ADDRESS`.

The aggregator, profiler and policy stay on the driver's node, as in `powertrip run`; each
site-worker process (`--workers N`) is started by a Ray actor on whichever node Ray places
it (spread over the nodes) and joins the aggregator over gRPC exactly as a local worker
does: the same `python -m services.site_worker` command, the same sites dealt round-robin.
So `rounds.csv` is the same, byte for byte, as without Ray (tests/integration/
test_ray_experiments.py).

* The worker is a child of its actor, started on the actor's main thread with
  PR_SET_PDEATHSIG (launcher.start_process), so when the actor dies (the driver's job ends,
  `ray.kill`, a lost node) the worker is sent SIGTERM and leaves: nothing outlives the run.
* The driver sees each remote worker through `RemoteProcess`, a stand-in with the part of
  Popen the drivers use (poll, wait, terminate, kill, returncode), so watching, signals and
  clean-up are the code of a local run. An actor that is lost (its node died) is a worker
  that exited with -9; its log, kept on its node, is copied to the run's logs/ when it ends.
* Network: the aggregator serves on the driver node's address (Ray's), which the workers
  dial. It is a plain gRPC port guarded by a join token made for the run (the workers get
  it through Ray; no TLS: `--insecure`). Like Ray's own ports, it belongs on the cluster's
  private network; a run across an untrusted network uses site bundles with mutual TLS
  (docs/deploy.md) instead.
* Each node needs this package, the same version, and its data, as for `--ray` sweeps.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from powertrip.app.experiments.launcher import LaunchError, ServiceProcess, track

#: seconds a remote worker gets to print its port line (importing torch, loading data)
START_TIMEOUT_S = 180.0
#: seconds between two asks of a remote worker whether it is still running
POLL_EVERY_S = 1.0
#: seconds an ask may take before the actor counts as lost
ASK_TIMEOUT_S = 30.0
#: lines of a remote worker's log copied back when it ends
LOG_LINES = 400


def token_file_in(directory: Path, token: str) -> Path:
    """The run's join token in `directory`/join-token, readable by its owner only (made so
    before the token is written), for a service's --join-token-file."""
    path = directory / "join-token"
    path.touch(mode=0o600)
    path.write_text(token)
    return path


def answer(ray: Any, ref: Any, timeout_s: float) -> Any:
    """ray.get of `ref` once it is ready, waiting in Python (TimeoutError after timeout_s):
    a signal that arrives inside a blocking ray.get comes out as a bare KeyboardInterrupt,
    and the CLI would lose which signal it was (SIGTERM must exit 143)."""
    deadline = time.monotonic() + timeout_s
    while True:
        ready, _ = ray.wait([ref], num_returns=1, timeout=0)
        if ready:
            return ray.get(ref)
        if time.monotonic() >= deadline:
            raise TimeoutError
        time.sleep(0.05)


class WorkerHost:
    """The actor body: starts one site worker on its node, answers whether it runs, stops
    it. Decorated with `ray.remote` when used (Ray is imported only with --ray)."""

    def __init__(self) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="powertrip-worker-"))
        self.service: ServiceProcess | None = None

    def start(self, name: str, args: list[str], join_token: str) -> dict[str, str]:
        """Start the worker; return its node once it has printed its port line."""
        import ray

        from powertrip.app.experiments.launcher import start_service

        token_file = token_file_in(self.scratch, join_token)
        try:  # the worker's own port is loopback (metrics, health): it dials out
            self.service = start_service(
                name,
                [*args, "--join-token-file", str(token_file)],
                self.scratch,
                timeout_s=START_TIMEOUT_S,
                wait_serving=False,
            )
        finally:
            token_file.unlink(missing_ok=True)  # read at start; not left on the node
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address()}

    def poll(self) -> int | None:
        return None if self.service is None else self.service.process.poll()

    def terminate(self) -> None:
        if self.service is not None:
            self.service.terminate()

    def finish(self, lines: int = LOG_LINES) -> str:
        """The ended worker's log (its last `lines`), and its scratch directory removed."""
        text = "" if self.service is None else self.service.log_tail(lines)
        shutil.rmtree(self.scratch, ignore_errors=True)
        return text


class RemoteProcess:
    """Popen's poll/wait/terminate/kill for a worker that a Ray actor runs, so a
    ServiceProcess (and everything that watches and stops one) can hold it."""

    stdout = None

    def __init__(self, ray: Any, actor: Any, log_path: Path, where: str) -> None:
        self.ray, self.actor, self.log_path, self.where = ray, actor, log_path, where
        self.returncode: int | None = None
        self._asked_at = 0.0
        self._asking: Any = None  # the poll asked and not yet answered

    def poll(self) -> int | None:
        """The exit code once the worker has ended, else None. Asks the actor at most every
        POLL_EVERY_S and never blocks on the answer (see `answer`)."""
        if self.returncode is not None:
            return self.returncode
        now = time.monotonic()
        if self._asking is None:
            if now - self._asked_at < POLL_EVERY_S:
                return None
            self._asking, self._asked_at = self.actor.poll.remote(), now
        try:
            code = answer(self.ray, self._asking, 0.0)
        except TimeoutError:
            if now - self._asked_at < ASK_TIMEOUT_S:
                return None
            self._ended(-9, f"its Ray actor did not answer for {ASK_TIMEOUT_S:.0f} s")
            return self.returncode
        except Exception as exc:  # the actor, or its node, is gone
            self._ended(-9, f"its Ray actor was lost ({type(exc).__name__}: {exc})")
            return self.returncode
        self._asking = None
        if code is not None:
            self._ended(code, "")
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.where), timeout or 0.0)
            time.sleep(0.1)
        assert self.returncode is not None
        return self.returncode

    def terminate(self) -> None:
        """Ask the actor to SIGTERM its worker (submitted, not waited for: it may be called
        from a signal handler)."""
        with contextlib.suppress(Exception):
            self.actor.terminate.remote()

    def kill(self) -> None:
        """End the actor: its worker gets SIGTERM from the kernel (PR_SET_PDEATHSIG)."""
        with contextlib.suppress(Exception):
            self.ray.kill(self.actor)
        if self.returncode is None:
            self._ended(-9, "its Ray actor was killed")

    def _ended(self, code: int, why: str) -> None:
        """Record the exit and copy the worker's log from its node (if it is still there)."""
        self.returncode = code
        text = ""
        if not why:
            with contextlib.suppress(Exception):
                text = answer(self.ray, self.actor.finish.remote(), ASK_TIMEOUT_S)
            with contextlib.suppress(Exception):
                self.ray.kill(self.actor)
        header = f"# site worker on Ray node {self.where}{'; ' + why if why else ''}\n"
        with contextlib.suppress(OSError):
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self.log_path.write_text(header + text + ("\n" if text else ""))


class RayWorkers:
    """A WorkerPlacement (runner.run_once) that starts the site workers as Ray actors,
    spread over the cluster's nodes, each asking for its training threads in CPUs and
    `--ray-gpus` GPUs (Ray sets CUDA_VISIBLE_DEVICES; the worker's device auto uses them)."""

    def __init__(self, ray: Any, cpus_per_worker: int = 1, gpus_per_worker: float = 0.0) -> None:
        self.ray = ray
        self.cpus_per_worker = max(1, cpus_per_worker)
        self.gpus_per_worker = gpus_per_worker
        self.aggregator_host = ray.util.get_node_ip_address()
        self.join_token = secrets.token_urlsafe(24)
        self._token_dir = tempfile.TemporaryDirectory(prefix="powertrip-ray-run-")
        self.nodes: list[dict[str, str]] = []

    def aggregator_args(self) -> list[str]:
        token_file = token_file_in(Path(self._token_dir.name), self.join_token)
        return ["--join-token-file", str(token_file), "--insecure"]

    def start(
        self, workers: Sequence[tuple[str, list[str]]], log_dir: Path
    ) -> list[ServiceProcess]:
        """Start every worker at once (each imports torch and loads its data in parallel),
        then wait for each; one that cannot start is a LaunchError naming it and its node."""
        host_class = self.ray.remote(
            num_cpus=self.cpus_per_worker,
            num_gpus=self.gpus_per_worker,
            scheduling_strategy="SPREAD",
        )(WorkerHost)
        started: list[tuple[str, Any, Any]] = []
        for name, args in workers:
            actor = host_class.remote()
            started.append((name, actor, actor.start.remote(name, args, self.join_token)))
        services: list[ServiceProcess] = []
        try:
            for name, actor, ready in started:
                try:
                    node = answer(self.ray, ready, START_TIMEOUT_S + 60)
                except TimeoutError:
                    raise LaunchError(
                        f"{name} did not start on the Ray cluster within "
                        f"{START_TIMEOUT_S + 60:.0f} s (no node with a free CPU?)"
                    ) from None
                except Exception as exc:
                    raise LaunchError(f"{name} did not start on the Ray cluster: {exc}") from None
                self.nodes.append(node)
                where = f"{node['node_ip']} ({node['node_id'][:12]})"
                process = RemoteProcess(self.ray, actor, log_dir / f"{name}.log", where)
                services.append(ServiceProcess(name, process, 0, process.log_path))  # type: ignore[arg-type]
        except BaseException:
            for _name, actor, _ready in started:
                with contextlib.suppress(Exception):
                    self.ray.kill(actor)
            raise
        return [track(service) for service in services]

    def close(self) -> None:
        self._token_dir.cleanup()
