"""Where shaping remembers what it applied: one JSON file per interface and netns.

``clear``/``status`` (possibly in a later process) read it back to find the relay and
the ifb device; ``apply`` writes it before changing anything so a rollback can too.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

from .commands import ShapingError

DEFAULT_STATE_DIR = "/run/powertrip-tc"
STATE_DIR_ENV = "POWERTRIP_TC_STATE_DIR"

StateDir = str | os.PathLike | None  # None: $POWERTRIP_TC_STATE_DIR, else /run/powertrip-tc


def netns_id() -> str:
    """Inode of this process's network namespace ('0' when it cannot be read)."""
    try:
        return str(os.stat("/proc/self/ns/net").st_ino)
    except OSError:
        return "0"


def resolve_state_dir(state_dir: StateDir) -> Path:
    """The given directory, else ``$POWERTRIP_TC_STATE_DIR``, else ``/run/powertrip-tc``."""
    return Path(state_dir or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


def state_key(iface: str) -> str:
    """File-name key of ``iface`` in this network namespace."""
    # The same interface name can exist in many network namespaces (containers): key
    # the state by namespace so clear in one never touches another's relay.
    return f"{iface}@netns{netns_id()}"


def ifb_name(iface: str) -> str:
    """The ifb device for ``iface``'s ingress: unique per interface and netns, <= 15 chars."""
    return f"ptifb{zlib.crc32(state_key(iface).encode()) & 0xFFFFFFFF:08x}"


def state_path(iface: str, state_dir: StateDir) -> Path:
    return resolve_state_dir(state_dir) / f"{state_key(iface)}.json"


def read_state(iface: str, state_dir: StateDir) -> dict | None:
    """The recorded state, or None when ``iface`` is not shaped (or the file is unreadable)."""
    try:
        return json.loads(state_path(iface, state_dir).read_text())
    except (OSError, ValueError):
        return None


def write_state(iface: str, state_dir: StateDir, state: dict) -> None:
    """Replace the state file atomically, so a reader never sees half of it."""
    path = state_path(iface, state_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise ShapingError(f"cannot write state under {path.parent}: {exc}") from None
