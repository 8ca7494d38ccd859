"""Start the four services as separate processes on loopback ports (the embedded default).

This is the same code path as a real deployment: each service is its own process and they
talk only over gRPC. Ports are chosen by the services themselves (port 0) and read back from
the one line each prints on stdout, except where a run picks its aggregator's port so that
its workers start beside it (`runner._start_together`); logs go to files under the run
directory.

No service outlives the command that started it: the drivers stop them when a run ends or
fails (`stop_services`), on SIGTERM or SIGINT (`stop_services_on_signals`, then `stop_all`),
and the kernel sends each SIGTERM when the driver dies without a word (SIGKILL, a crash:
PR_SET_PDEATHSIG, set by `_BOOTSTRAP`).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from powertrip.rpc.channels import wait_until_serving

REPO_ROOT = Path(__file__).resolve().parents[3]
#: lines of a dead service's log shown with its exit
LOG_TAIL_LINES = 10

#: Runs in every service process before it becomes the service (`python -c` then exec):
#: on Linux it asks the kernel to send the process SIGTERM when the driver that started it
#: ends, however it ends (SIGKILL and crashes included), so no service outlives its driver.
#: Setting PR_SET_PDEATHSIG in a fresh single-threaded interpreter, not in a preexec_fn,
#: keeps clear of the fork-with-threads hazards (the driver has gRPC and tqdm threads); the
#: setting survives the exec. It follows the *thread* that started the process, so services
#: are started from the main thread (the drivers do). SIGTERM rather than SIGKILL: the
#: services drain and log why they stopped; each stops within seconds of it.
_BOOTSTRAP = """\
import os, signal, sys
parent = int(sys.argv[1])
if sys.platform.startswith("linux"):
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass
if os.getppid() != parent:
    sys.exit(70)  # the driver ended before the guard was in place
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


class LaunchError(RuntimeError):
    pass


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT reached a driver; `stopped` names the services it was running."""

    def __init__(self, signum: int, stopped: Sequence[str] = ()):
        self.signum = signum
        self.stopped = list(stopped)
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


@dataclass(eq=False)
class ServiceProcess:
    name: str
    process: subprocess.Popen
    port: int
    log_path: Path
    host: str = "127.0.0.1"
    terminated: bool = field(default=False, init=False, repr=False)

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def exit_report(self, lines: int = LOG_TAIL_LINES) -> str:
        """'NAME exited with code N; last lines of its log:' and those lines."""
        code = self.process.returncode
        how = ""
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                how = f" (killed by {signal.Signals(-code).name})"
        tail = self.log_tail(lines) or "(the log is empty)"
        return (
            f"{self.name} exited with code {code}{how}; last lines of its log:\n"
            f"{tail}\n(full log: {self.log_path})"
        )

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM: the services drain and exit), once; safe in a signal
        handler (no waiting, no lock taken)."""
        if self.terminated:
            return
        self.terminated = True
        with contextlib.suppress(OSError):
            self.process.terminate()

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM (graceful drain), then SIGKILL if it does not exit in time."""
        stop_services([self], timeout_s)
        return self.process.returncode


#: every service this process started and has not yet stopped (what a signal stops). No
#: lock: the signal handler reads it in the main thread, possibly in the middle of a change
#: there (a lock would deadlock), and single dict operations are atomic under the GIL.
_LIVE: dict[int, ServiceProcess] = {}


def track(service: ServiceProcess) -> ServiceProcess:
    """Count a process started elsewhere (a site worker on a Ray node: its `process` is a
    stand-in with Popen's poll/wait/terminate/kill) among those a signal stops."""
    _LIVE[id(service)] = service
    return service


def live_services() -> list[ServiceProcess]:
    return list(_LIVE.copy().values())


def stop_services(services: Iterable[ServiceProcess], timeout_s: float = 10.0) -> list[str]:
    """Stop services together: SIGTERM to all, wait for all up to `timeout_s` in total, then
    SIGKILL what is left. Returns the names of those that were still running."""
    services = list(services)
    running = [s for s in services if s.alive()]
    for service in running:
        service.terminate()
    deadline = time.monotonic() + timeout_s
    for service in services:
        try:
            service.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            service.kill()
            service.process.wait()
        if service.process.stdout:
            service.process.stdout.close()
        _LIVE.pop(id(service), None)
    return [s.name for s in running]


def stop_all(timeout_s: float = 10.0) -> list[str]:
    """Stop every service this process started (the drivers' last word on a signal)."""
    return stop_services(live_services(), timeout_s)


@contextlib.contextmanager
def stop_services_on_signals() -> Iterator[None]:
    """While inside: SIGTERM or SIGINT sends SIGTERM to every live service at once and
    raises Interrupted in the main thread, so the drivers' clean-up (stop_services, then
    stop_all) finds them already draining; a second signal SIGKILLs what is left. Outside
    the main thread (where handlers cannot be set) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handle(signum, _frame) -> None:
        if received:  # a second signal: no more waiting for drains
            for service in live_services():
                service.kill()
            return
        received.append(signum)
        running = [s for s in live_services() if s.alive()]
        for service in running:
            service.terminate()
        raise Interrupted(signum, [s.name for s in running])

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    # one BLAS/OpenMP thread per process unless told otherwise: processes are the parallelism
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    # OpenMP threads that finish a parallel region sleep instead of spinning: the aggregator
    # evaluates on every core while other processes (site workers, a second reproduce) may
    # hold them, and spinning threads wait for cores the others need. Evaluating 2,000
    # FEMNIST images on 2 threads beside a reproduce on both cores: 3.2 s spinning, 2.0 s
    # sleeping, 2.0 s on one thread (docs/benchmarks.md at 291b5ac2). The numbers do not change.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


def _first_line(process: subprocess.Popen, deadline: float) -> str | None:
    """The first line the process prints, or None at EOF (it exited) or at the deadline."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    data = b""
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0].decode(errors="replace").strip() if data else None


def start_service(
    name: str,
    args: Sequence[str],
    log_dir: Path,
    *,
    timeout_s: float = 60.0,
    wait_serving: bool = True,
    host: str = "127.0.0.1",
) -> ServiceProcess:
    """`python -m services.<name> --port 0 --host HOST ARGS`, wait for its port line and
    health SERVING.

    The process ends when this one does (PR_SET_PDEATHSIG, see _BOOTSTRAP): call from the
    main thread, which outlives it."""
    service = spawn_service(name, args, log_dir, host=host)
    return await_started(service, timeout_s=timeout_s, wait_serving=wait_serving)


def spawn_service(
    name: str, args: Sequence[str], log_dir: Path, *, port: int = 0, host: str = "127.0.0.1"
) -> ServiceProcess:
    """`python -m services.<name> --port PORT --host HOST ARGS`, not waited for:
    `await_started` reads its port line. With a fixed `port` a client can be started before
    the service is up. `host` is loopback but for an aggregator that workers on other
    machines dial (`powertrip run --ray`)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    service = start_process(
        name,
        f"services.{name.split(':')[0]}",
        ["--port", str(port), "--host", host, *args],
        log_dir / f"{name}.log",
        stdout=subprocess.PIPE,
    )
    service.port = port
    service.host = host
    return service


def await_started(
    service: ServiceProcess, *, timeout_s: float = 60.0, wait_serving: bool = True
) -> ServiceProcess:
    """Wait for a spawned service's port line (and health SERVING); stop it and raise
    LaunchError, with its log's tail, if it exits or stays silent."""
    name, process, log_path = service.name, service.process, service.log_path
    deadline = time.monotonic() + timeout_s
    line = _first_line(process, deadline) or ""
    if "listening on port" not in line:
        if process.poll() is None:
            service.stop()
            raise LaunchError(
                f"{name} printed no port line within {timeout_s:.0f} s; last lines of its "
                f"log:\n{service.log_tail(LOG_TAIL_LINES)}\n(full log: {log_path})"
            )
        service.stop()
        raise LaunchError(f"{name} did not start: {service.exit_report()}")
    service.port = int(line.rsplit(" ", 1)[-1])
    if wait_serving:
        try:
            wait_until_serving(service.target, timeout_s=max(1.0, deadline - time.monotonic()))
        except TimeoutError as exc:
            service.stop()
            raise LaunchError(f"{name}: {exc}\n{service.log_tail()}") from None
    return service


def free_port() -> int:
    """A loopback port that was free a moment ago: another process may take it before the
    service binds it, so a caller keeps a fallback to port 0 (`bind_failed`)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bind_failed(service: ServiceProcess) -> bool:
    """Whether a service that did not start could not bind its port (its log says so)."""
    return not service.alive() and f"cannot bind {service.target}" in service.log_tail()


def start_process(
    name: str, module: str, args: Sequence[str], log_path: Path, *, stdout=None
) -> ServiceProcess:
    """`python -m MODULE ARGS` as a child that ends with this process (PR_SET_PDEATHSIG,
    see _BOOTSTRAP) and that a signal stops (it is in live_services() until stopped); its
    stderr, and its stdout unless `stdout` says otherwise, go to `log_path`. Call from the
    main thread, which outlives it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file = log_path.open("ab")
    process = subprocess.Popen(
        [
            sys.executable,
            "-P",
            "-c",
            _BOOTSTRAP,
            str(os.getpid()),
            "-P",  # the repository comes from PYTHONPATH, never from the working directory
            "-m",
            module,
            *args,
        ],
        stdout=log_file if stdout is None else stdout,
        stderr=log_file,
        env=_env(),
        # the caller's directory: relative paths (--out, --config, --data-dir) mean the same
        # to the child as to the command that started it
        cwd=Path.cwd(),
    )
    log_file.close()
    service = ServiceProcess(name, process, 0, log_path)
    _LIVE[id(service)] = service
    return service


@dataclass
class Deployment:
    """Profiler + policy, shared by every run of a comparison (they are stateless here)."""

    config_path: Path
    log_dir: Path
    services: list[ServiceProcess] = field(default_factory=list)

    def __enter__(self) -> Deployment:
        try:  # both import and start at once, then are waited for
            self.profiler = spawn_service(
                "profiler", ["--config", str(self.config_path)], self.log_dir
            )
            self.services.append(self.profiler)
            self.policy = spawn_service("policy", [], self.log_dir)
            self.services.append(self.policy)
            for service in self.services:
                await_started(service)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        stop_services(reversed(self.services))
        self.services.clear()


def split_sites(num_sites: int, workers: int) -> list[list[str]]:
    """Deal site ids round-robin to worker processes, so any selection keeps them all busy."""
    from powertrip.core.profiles import site_id

    workers = max(1, min(workers, num_sites))
    return [[site_id(i) for i in range(w, num_sites, workers)] for w in range(workers)]
