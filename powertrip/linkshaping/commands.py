"""Running ``tc`` and ``ip``: finding the binaries, running them, naming their failures.

Every failure becomes a :class:`ShapingError` whose message is the reason, so the scripts
can print it and exit non-zero; :class:`CommandFailed` also keeps the command and its
stderr, which ``apply`` reads to decide whether another mode could still work.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess


class ShapingError(Exception):
    """Shaping could not be applied/cleared; the message names the reason."""


class CommandFailed(ShapingError):
    """A ``tc``/``ip`` command exited non-zero; says whether for permission or a missing qdisc."""

    def __init__(self, cmd: list[str], rc: int, stderr: str):
        self.cmd, self.rc, self.stderr = cmd, rc, stderr.strip()
        super().__init__(self._message())

    @property
    def unknown_qdisc(self) -> bool:
        s = self.stderr.lower()
        return "qdisc kind is unknown" in s or "unknown qdisc" in s

    @property
    def not_permitted(self) -> bool:
        s = self.stderr.lower()
        return "operation not permitted" in s or "permission denied" in s

    def _message(self) -> str:
        cmd = " ".join(self.cmd)
        if self.not_permitted:
            return (
                f"permission denied: '{cmd}' failed ({self.stderr}); shaping needs "
                "CAP_NET_ADMIN (run as root, or give the container cap_add: NET_ADMIN)"
            )
        if self.unknown_qdisc:
            return f"'{cmd}' failed: the kernel does not support this qdisc ({self.stderr})"
        return f"'{cmd}' failed (exit {self.rc}): {self.stderr or 'no error output'}"


def num(x: float) -> str:
    """Format a number for tc without exponent notation: 40.0 -> '40', 0.5 -> '0.5'."""
    text = f"{x:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def tc_bin() -> str:
    """Path of ``tc``; also looks in sbin, which a non-root PATH often lacks."""
    path = shutil.which("tc") or next(
        (p for p in ("/usr/sbin/tc", "/sbin/tc") if os.access(p, os.X_OK)), None
    )
    if not path:
        raise ShapingError("the 'tc' command (iproute2) is not installed")
    return path


def ip_bin() -> str | None:
    """Path of ``ip``, or None: without it there is no ifb and no netns probe, not an error."""
    return shutil.which("ip") or next(
        (p for p in ("/usr/sbin/ip", "/sbin/ip", "/bin/ip") if os.access(p, os.X_OK)), None
    )


def run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    """Run one command; with ``check``, a non-zero exit raises :class:`CommandFailed`."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise ShapingError(f"command not found: {cmd[0]}") from None
    except subprocess.TimeoutExpired:
        raise ShapingError(f"'{' '.join(cmd)}' timed out") from None
    if check and proc.returncode != 0:
        raise CommandFailed(cmd, proc.returncode, proc.stderr or proc.stdout)
    return proc


def check_iface(iface: str) -> None:
    """Refuse a name that is not an existing interface; commands split on spaces rely on it."""
    if not iface or "/" in iface or len(iface) > 15 or iface.strip() != iface:
        raise ShapingError(f"bad interface name {iface!r}")
    try:
        socket.if_nametoindex(iface)
    except OSError:
        raise ShapingError(
            f"interface {iface!r} does not exist (in this network namespace)"
        ) from None
