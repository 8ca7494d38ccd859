"""The delay relay as a background process: start it, tell whether it runs, stop it.

The relay itself is :mod:`.delay_relay` (asyncio, standard library only).  It is started
by path as its own process, in a new session, so it outlives the ``tc/shape`` that
started it and ``tc/clear`` (another process) can stop it by the pid in the state file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .commands import ShapingError, num
from .planning import Plan, fmt_endpoint
from .state import StateDir, resolve_state_dir, state_key

RELAY_SCRIPT = Path(__file__).resolve().with_name("delay_relay.py")
RELAY_START_TIMEOUT_S = 10.0
RELAY_STOP_TIMEOUT_S = 5.0


def pid_alive(pid: int) -> bool:
    """True for a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


def is_relay(pid: int) -> bool:
    """True when ``pid`` runs ``delay_relay.py``, so a recycled pid is never signalled."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"delay_relay.py" in fh.read()
    except OSError:
        return False


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop_relay(pid: int) -> bool:
    """SIGTERM (then SIGKILL) the relay; False if it was not running."""
    if not pid or not pid_alive(pid) or not is_relay(pid):
        _reap(pid)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + RELAY_STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            return True
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.05)
    _reap(pid)
    return True


def start_relay(plan_: Plan, state_dir: StateDir) -> tuple[int, str, str]:
    """Start the plan's relays in one process; (pid, pidfile, log) once it listens."""
    sdir = resolve_state_dir(state_dir)
    key = state_key(plan_.iface)
    pidfile = sdir / f"{key}.relay.pid"
    logfile = sdir / f"{key}.relay.log"
    with contextlib.suppress(OSError):
        pidfile.unlink()
    cmd = [
        sys.executable or "python3",
        str(RELAY_SCRIPT),
        "--delay-ms",
        num(plan_.relay_delay_ms),
        "--pidfile",
        str(pidfile),
    ]
    for listen, target in plan_.relays:
        cmd += ["--listen", fmt_endpoint(listen), "--target", fmt_endpoint(target)]
    with open(logfile, "ab") as log, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(
            cmd, stdin=devnull, stdout=log, stderr=log, start_new_session=True, close_fds=True
        )
    deadline = time.monotonic() + RELAY_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = ""
            with contextlib.suppress(OSError):
                tail = logfile.read_text(errors="replace").strip().splitlines()[-1]
            raise ShapingError(f"delay relay failed to start (exit {proc.returncode}): {tail}")
        if pidfile.exists():
            return proc.pid, str(pidfile), str(logfile)
        time.sleep(0.02)
    stop_relay(proc.pid)
    raise ShapingError(f"delay relay did not start listening within {RELAY_START_TIMEOUT_S:g} s")
