"""Start the four services as separate processes on loopback ports (the embedded default).

This is the same code path as a real deployment: each service is its own process and they
talk only over gRPC. Ports are chosen by the services themselves (port 0) and read back from
the one line each prints on stdout; logs go to files under the run directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from powertrip.rpc.channels import wait_until_serving

REPO_ROOT = Path(__file__).resolve().parents[2]


class LaunchError(RuntimeError):
    pass


@dataclass
class ServiceProcess:
    name: str
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM (graceful drain), then SIGKILL if it does not exit in time."""
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()
        return self.process.returncode


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    # one BLAS/OpenMP thread per process unless told otherwise: processes are the parallelism
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    return env


def start_service(
    name: str,
    args: Sequence[str],
    log_dir: Path,
    *,
    timeout_s: float = 60.0,
    wait_serving: bool = True,
) -> ServiceProcess:
    """`python -m services.<name> --port 0 ARGS`, wait for its port line and health SERVING."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    log_file = log_path.open("ab")
    process = subprocess.Popen(
        [
            sys.executable,
            "-P",  # the repository comes from PYTHONPATH, never from the working directory
            "-m",
            f"services.{name.split(':')[0]}",
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=log_file,
        env=_env(),
        # the caller's directory: relative paths (--out, --config, --data-dir) mean the same
        # to the services as to the command that started them
        cwd=Path.cwd(),
    )
    log_file.close()
    deadline = time.monotonic() + timeout_s
    port = None
    assert process.stdout is not None
    line = process.stdout.readline().decode(errors="replace").strip()
    if "listening on port" in line:
        port = int(line.rsplit(" ", 1)[-1])
    service = ServiceProcess(name, process, port or 0, log_path)
    if port is None:
        service.stop()
        raise LaunchError(
            f"{name} did not start (exit {process.returncode}):\n{service.log_tail()}"
        )
    if wait_serving:
        try:
            wait_until_serving(service.target, timeout_s=max(1.0, deadline - time.monotonic()))
        except TimeoutError as exc:
            service.stop()
            raise LaunchError(f"{name}: {exc}\n{service.log_tail()}") from None
    return service


@dataclass
class Deployment:
    """Profiler + policy, shared by every run of a comparison (they are stateless here)."""

    config_path: Path
    log_dir: Path
    services: list[ServiceProcess] = field(default_factory=list)

    def __enter__(self) -> Deployment:
        try:
            self.profiler = start_service(
                "profiler", ["--config", str(self.config_path)], self.log_dir
            )
            self.services.append(self.profiler)
            self.policy = start_service("policy", [], self.log_dir)
            self.services.append(self.policy)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for service in reversed(self.services):
            service.stop()
        self.services.clear()


def split_sites(num_sites: int, workers: int) -> list[list[str]]:
    """Deal site ids round-robin to worker processes, so any selection keeps them all busy."""
    from powertrip.profiles import site_id

    workers = max(1, min(workers, num_sites))
    return [[site_id(i) for i in range(w, num_sites, workers)] for w in range(workers)]
