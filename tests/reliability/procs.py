"""Helpers for fault tests: find the real service processes a CLI started, and kill them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from powertrip.app.experiments.launcher import free_port  # noqa: F401 - the tests import it from here

REPO = Path(__file__).resolve().parents[2]


def children(pid: int) -> list[int]:
    """Direct child pids of `pid`, read from /proc (no psutil needed)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name may contain spaces and parentheses: split after the last ')'
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def find_child(pid: int, module: str, timeout_s: float = 60.0) -> int:
    """Pid of the child of `pid` running `python -m <module>`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in children(pid):
            if f"-m {module} " in cmdline(child) + " ":
                return child
        time.sleep(0.05)
    raise TimeoutError(f"no child of {pid} runs {module}")


def kill9(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def powertrip(*args: str, extra_env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    env = {**os.environ, **(extra_env or {})}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(
        [sys.executable, "-m", "powertrip.app.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
        **kwargs,
    )


def checkpoint_round(out: Path) -> int:
    """Round of the last checkpoint in a run directory (0 when none yet)."""
    try:
        return int(json.loads((out / "checkpoint" / "state.json").read_text())["round"])
    except (OSError, ValueError, KeyError):
        return 0


def wait_for(predicate, timeout_s: float, what: str, poll_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll_s)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def scrape(port: int) -> dict[str, float]:
    """Prometheus text from a service's metrics port, as {'name{labels}': value}."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out
