"""A Flower SuperLink for a test, run the way examples/flower/README.md runs one: simulation
mode, started by hand, apps sent to it with `flwr run`. It takes a free port (never Flower's
fixed local one, which a user's own SuperLink may hold) and a private FLWR_HOME, which every
process it starts inherits, so that when the test ends, passed or failed, the SuperLink is
stopped and no process of it (SuperExec, Ray) is left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.reliability.procs import free_port

#: the name `flwr` knows the test's SuperLink by, in its FLWR_HOME/config.toml
CONNECTION = "test"


@dataclass(frozen=True)
class SuperLink:
    """A running SuperLink: `run` sends it an app."""

    bin_dir: Path  # where `flwr` and `flower-superlink` are: the environment the apps run in
    env: dict[str, str]
    log: Path

    def run(self, app: Path, *args: str, cwd: Path, timeout: float = 600) -> str:
        """`flwr run APP <the test's connection> --stream ARGS`, which returns when the run
        ends; its output, asserted to have exited 0."""
        done = subprocess.run(
            [str(self.bin_dir / "flwr"), "run", str(app), CONNECTION, "--stream", *args],
            capture_output=True, text=True, timeout=timeout, env=self.env, cwd=cwd,
        )  # fmt: skip
        out = done.stdout + done.stderr
        assert done.returncode == 0, f"flwr run {app}:\n{out[-4000:]}\n{self.log_tail()}"
        return out

    def log_tail(self) -> str:
        return f"SuperLink log ({self.log}):\n{self.log.read_text(errors='replace')[-3000:]}"


@contextmanager
def superlink(
    where: Path, bin_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> Iterator[SuperLink]:
    """A SuperLink started in `where` (its FLWR_HOME and log there) from `bin_dir` (this
    Python's by default), with `env` (os.environ by default) as its environment."""
    bin_dir = bin_dir or Path(sys.executable).parent
    home = where / "flwr-home"
    home.mkdir(parents=True)
    port = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n'
        f'[superlink.{CONNECTION}]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
    )  # an explicit address: `flwr` never starts a SuperLink of its own for it
    env = os.environ if env is None else env
    full = {
        **env,
        "FLWR_HOME": str(home),
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', os.defpath)}",  # its SuperExec: bin_dir's
    }
    link = SuperLink(bin_dir, full, where / "superlink.log")
    with link.log.open("w") as log:
        process = subprocess.Popen(
            [str(bin_dir / "flower-superlink"), "--insecure", "--simulation",
             "--disable-runtime-dependency-installation", "--host", "127.0.0.1",
             "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, env=full, cwd=where, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_healthy(process, port, link)
        yield link
    finally:
        left = _stop(process, home)
    assert not left, f"processes of the test's SuperLink outlived its stop: {left}"


def _wait_healthy(process: subprocess.Popen, port: int, link: SuperLink) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, f"flower-superlink exited\n{link.log_tail()}"
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"the SuperLink did not answer in 60 s\n{link.log_tail()}")


def _stop(process: subprocess.Popen, home: Path) -> list[int]:
    """Stop the SuperLink as the README does (SIGTERM), then kill what is left of it:
    returns the processes that had to be killed."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    left = wait_gone(home, timeout_s=30)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def wait_gone(home: Path, timeout_s: float) -> list[int]:
    """Waits until no process runs with FLWR_HOME=`home` in its environment; those still
    running after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while (left := processes_of(home)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def processes_of(home: Path) -> list[int]:
    """The processes (not zombies) whose environment has FLWR_HOME=`home`."""
    tag = f"\0FLWR_HOME={home}\0".encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if tag in b"\0" + proc.joinpath("environ").read_bytes() + b"\0":
                if proc.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(proc.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def run_minimal(link: SuperLink, app: Path, out: Path, cwd: Path) -> list[dict]:
    """examples/flower/minimal as its README line runs it (6 SuperNodes), with `out` for its
    out-dir; the decisions of its one run."""
    from powertrip.app.flower import read_decisions

    link.run(app, "--federation-config", "num-supernodes=6", "--run-config", f"out-dir='{out}'",
             cwd=cwd)  # fmt: skip
    [run] = out.glob("run-*")  # OUT-DIR/run-<Flower run id>
    return read_decisions(run / "decisions.jsonl")
