"""A stop signal never deadlocks a service (powertrip/rpc/server.py: handle_stop_signals).

Python runs a signal handler on the main thread between two bytecodes, possibly while that
thread holds the stop event's own lock (waking up inside `done.wait()`). A handler that set
the event there waited for itself: a site worker hit by SIGTERM twice within 4 ms hung with
its run long over. Here the main thread holds the event's lock while SIGTERM arrives twice,
in a child process so that a deadlock fails the test instead of hanging it."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import signal, threading, time
from powertrip.rpc.server import handle_stop_signals
done = handle_stop_signals(threading.Event())
with done._cond:  # the lock a waking done.wait() holds
    signal.raise_signal(signal.SIGTERM)
    signal.raise_signal(signal.SIGTERM)
    print("handled", flush=True)
print("stopped" if done.wait(5) else "not stopped", flush=True)
"""


def test_two_sigterms_while_the_main_thread_holds_the_stop_event_lock_do_not_deadlock():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60
    )  # a deadlock raises TimeoutExpired here
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["handled", "stopped"], done.stdout + done.stderr[-2000:]
