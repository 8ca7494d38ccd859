"""What the running kernel supports: whether the ``netem`` qdisc can be used.

``auto`` mode picks netem (delay in the kernel, for all traffic) when it exists, else htb
plus the userspace relay.  The answer is cached for the process: ``_NETEM_CACHE`` is also
what tests set to pretend a kernel has (or lacks) netem.
"""

from __future__ import annotations

import gzip
import os
import platform
import shutil

from .commands import ip_bin, run, tc_bin

_NETEM_CACHE: tuple[bool, str] | None = None


def _kernel_config() -> str | None:
    candidates = ["/proc/config.gz", f"/boot/config-{platform.release()}"]
    for path in candidates:
        try:
            if path.endswith(".gz"):
                with gzip.open(path, "rt", errors="replace") as fh:
                    return fh.read()
            with open(path, errors="replace") as fh:
                return fh.read()
        except OSError:
            continue
    return None


def _probe_netem_in_private_netns() -> bool | None:
    """Try to add netem on the loopback of a throwaway network namespace."""
    ip = ip_bin()
    if not ip or os.geteuid() != 0:
        return None
    name = f"ptprobe{os.getpid()}"
    if run([ip, "netns", "add", name], check=False).returncode != 0:
        return None
    try:
        proc = run(
            [
                ip,
                "netns",
                "exec",
                name,
                tc_bin(),
                "qdisc",
                "add",
                "dev",
                "lo",
                "root",
                "netem",
                "delay",
                "1ms",
            ],
            check=False,
        )
        if proc.returncode == 0:
            return True
        err = (proc.stderr or "").lower()
        if "qdisc kind is unknown" in err or "unknown qdisc" in err:
            return False
        return None
    finally:
        run([ip, "netns", "del", name], check=False)


def netem_support(refresh: bool = False) -> tuple[bool, str]:
    """(available, how it was determined).  Checks, in order: a loaded sch_netem
    module, the kernel config (/proc/config.gz, /boot/config-*; modprobe for =m),
    then a probe in a throwaway network namespace."""
    global _NETEM_CACHE
    if _NETEM_CACHE is not None and not refresh:
        return _NETEM_CACHE
    result: tuple[bool, str] | None = None
    if os.path.isdir("/sys/module/sch_netem"):
        result = (True, "sch_netem module loaded")
    if result is None:
        config = _kernel_config()
        if config is not None:
            if "CONFIG_NET_SCH_NETEM=y" in config:
                result = (True, "kernel built with CONFIG_NET_SCH_NETEM=y")
            elif "CONFIG_NET_SCH_NETEM=m" in config:
                modprobe = shutil.which("modprobe")
                if modprobe and run([modprobe, "-q", "sch_netem"], check=False).returncode == 0:
                    result = (True, "sch_netem module loaded with modprobe")
                elif os.path.isdir("/sys/module/sch_netem"):
                    result = (True, "sch_netem module present")
                # else: maybe auto-loaded on first use; probe below
            elif "CONFIG_NET_SCH_NETEM is not set" in config:
                result = (False, "kernel config has CONFIG_NET_SCH_NETEM unset")
    if result is None:
        probed = _probe_netem_in_private_netns()
        if probed is not None:
            result = (probed, "probed netem in a private network namespace")
    if result is None:
        result = (False, "could not determine netem support (assuming none)")
    _NETEM_CACHE = result
    return result


def has_netem() -> bool:
    """True when the running kernel can use the netem qdisc."""
    return netem_support()[0]


def mark_netem_unusable(reason: str) -> None:
    """Detection said yes but the kernel refused netem: later plans in this process use htb."""
    global _NETEM_CACHE
    _NETEM_CACHE = (False, reason)
