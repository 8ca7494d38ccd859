"""One reproduce process per (set-up, seed) group at a time: a lock in the group's folder.

Several `powertrip reproduce` processes may work on one output directory: the helpers that
`--jobs N` starts, or a second command started by mistake. Each group (one profiler and
policy, its runs one after another) is run by whichever process takes its lock first; the
others move on to the next group instead of deleting and redoing each other's runs.

The lock is `flock` on `OUT/runs/<set-up>/seed<s>/.reproduce.lock`, so the kernel lets go
of it when its process ends in any way (Ctrl-C, SIGKILL, a crash): there is no stale lock to
clean up. The file holds the owner's pid and host, for the message of the one that waits.
(flock is advisory and local: processes on other machines sharing the folder over NFS are
not excluded.)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO

LOCK_NAME = ".reproduce.lock"


class GroupLock:
    """A non-blocking exclusive lock on one group folder."""

    def __init__(self, group_dir: Path):
        self.path = group_dir / LOCK_NAME
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> bool:
        """Take the lock if no other process holds it; never waits."""
        if self._file is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # BlockingIOError: another process holds it
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        handle.write(json.dumps(owner))
        handle.flush()
        self._file = handle
        return True

    def owner(self) -> str:
        """'pid N on HOST' of the process named in the lock file ('another process' if the
        file cannot be read)."""
        try:
            data = json.loads(self.path.read_text())
            return f"pid {int(data['pid'])} on {data['host']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "another process"

    def release(self) -> None:
        """Let go (the file stays: removing it could race with the next owner's flock)."""
        if self._file is None:
            return
        with contextlib.suppress(OSError):
            fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()
        self._file = None

    def __enter__(self) -> GroupLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()
