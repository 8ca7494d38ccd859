#!/usr/bin/env python3
"""Link shaping for PowerTrip site containers: rate limit + latency on one interface.

Python API (standard library only, so the site worker can import it as is)::

    import shaping                       # with tc/ on sys.path, or `from tc import shaping`
    shaping.has_netem() -> bool
    shaping.apply(iface, delay_ms, rate_mbit, mode="auto",
                  relay_listen=None, relay_target=None, state_dir=None) -> str
    shaping.clear(iface, state_dir=None) -> str
    shaping.status(iface, state_dir=None) -> dict
    shaping.plan(iface, delay_ms, rate_mbit, mode="auto", ...) -> Plan   # dry run

``apply`` returns (and the ``tc/shape`` script prints) one line naming the mode used.
Every failure raises :class:`ShapingError` (the scripts exit non-zero with its message)
and leaves the interface as it was: nothing ever runs half-shaped silently.

Modes
-----
``netem`` (hosts whose kernel has sch_netem)
    htb on the egress root limits the rate; a netem child of the htb class adds the
    one-way delay on egress, and a second netem on an ifb device that receives the
    interface's ingress traffic adds the same delay on the way in.  RTT of *all*
    traffic on the interface grows by 2 x delay.  Without ifb the whole 2 x delay goes
    on egress (same RTT).
``htb`` (kernels without netem, e.g. PowerTrip's CI machines)
    htb on the egress root limits the rate; the delay comes from a userspace TCP relay
    (``delay_relay.py``) that holds every byte for ``delay_ms`` in each direction.  Only
    traffic that goes through the relay (``--relay-listen`` -> ``--relay-target``) is
    delayed, RTT through it grows by 2 x delay.  A delay > 0 without a relay is refused.
``auto``
    netem when the kernel has it, else htb.

``delay_ms`` is always the ONE-WAY delay: the round-trip time grows by 2 x delay_ms.
``rate_mbit`` limits egress (what the site sends).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import json
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
RELAY_SCRIPT = HERE / "delay_relay.py"
DEFAULT_STATE_DIR = "/run/powertrip-tc"
STATE_DIR_ENV = "POWERTRIP_TC_STATE_DIR"
MODES = ("auto", "netem", "htb")
RELAY_START_TIMEOUT_S = 10.0
RELAY_STOP_TIMEOUT_S = 5.0

__all__ = [
    "ShapingError",
    "Plan",
    "has_netem",
    "netem_support",
    "plan",
    "apply",
    "clear",
    "status",
    "describe_status",
    "main",
]


class ShapingError(Exception):
    """Shaping could not be applied/cleared; the message names the reason."""


# --------------------------------------------------------------------------- helpers


def _num(x: float) -> str:
    """Format a number for tc without exponent notation: 40.0 -> '40', 0.5 -> '0.5'."""
    text = f"{x:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6HOST]:PORT`` -> (host, port); raises ShapingError."""
    text = str(text).strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ShapingError(f"bad relay address {text!r}: expected HOST:PORT")
    try:
        port_num = int(port)
    except ValueError:
        raise ShapingError(f"bad relay address {text!r}: port is not a number") from None
    if not 0 < port_num < 65536:
        raise ShapingError(f"bad relay address {text!r}: port out of range")
    return host, port_num


def _fmt_endpoint(ep: tuple[str, int]) -> str:
    host, port = ep
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _as_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _tc_bin() -> str:
    path = shutil.which("tc") or next(
        (p for p in ("/usr/sbin/tc", "/sbin/tc") if os.access(p, os.X_OK)), None
    )
    if not path:
        raise ShapingError("the 'tc' command (iproute2) is not installed")
    return path


def _ip_bin() -> str | None:
    return shutil.which("ip") or next(
        (p for p in ("/usr/sbin/ip", "/sbin/ip", "/bin/ip") if os.access(p, os.X_OK)), None
    )


class _CommandFailed(ShapingError):
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


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise ShapingError(f"command not found: {cmd[0]}") from None
    except subprocess.TimeoutExpired:
        raise ShapingError(f"'{' '.join(cmd)}' timed out") from None
    if check and proc.returncode != 0:
        raise _CommandFailed(cmd, proc.returncode, proc.stderr or proc.stdout)
    return proc


def _check_iface(iface: str) -> None:
    if not iface or "/" in iface or len(iface) > 15 or iface.strip() != iface:
        raise ShapingError(f"bad interface name {iface!r}")
    try:
        socket.if_nametoindex(iface)
    except OSError:
        raise ShapingError(
            f"interface {iface!r} does not exist (in this network namespace)"
        ) from None


def _netns_id() -> str:
    try:
        return str(os.stat("/proc/self/ns/net").st_ino)
    except OSError:
        return "0"


def _state_dir(state_dir: str | os.PathLike | None) -> Path:
    return Path(state_dir or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


def _state_key(iface: str) -> str:
    # The same interface name can exist in many network namespaces (containers): key
    # the state by namespace so clear in one never touches another's relay.
    return f"{iface}@netns{_netns_id()}"


def _ifb_name(iface: str) -> str:
    return f"ptifb{zlib.crc32(_state_key(iface).encode()) & 0xFFFFFFFF:08x}"


# --------------------------------------------------------------------------- netem detection

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
    ip = _ip_bin()
    if not ip or os.geteuid() != 0:
        return None
    name = f"ptprobe{os.getpid()}"
    if _run([ip, "netns", "add", name], check=False).returncode != 0:
        return None
    try:
        proc = _run(
            [
                ip,
                "netns",
                "exec",
                name,
                _tc_bin(),
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
        _run([ip, "netns", "del", name], check=False)


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
                if modprobe and _run([modprobe, "-q", "sch_netem"], check=False).returncode == 0:
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


# --------------------------------------------------------------------------- planning


@dataclasses.dataclass
class Plan:
    iface: str
    mode: str  # "netem" or "htb" (resolved)
    delay_ms: float
    rate_mbit: float
    relays: list[tuple[tuple[str, int], tuple[str, int]]]
    relay_delay_ms: float
    ifb: str | None
    commands: list[list[str]]
    description: str
    netem_reason: str = ""

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["relays"] = [[_fmt_endpoint(a), _fmt_endpoint(b)] for a, b in self.relays]
        return d


def _cmd(binary: str, args: str) -> list[str]:
    """[binary, *words]; safe because interface names are validated (no spaces)."""
    return [binary, *args.split()]


def _htb_commands(tc: str, iface: str, rate_mbit: float) -> list[list[str]]:
    rate = f"{_num(rate_mbit)}mbit"
    # burst: ~2 ms worth of bytes at the configured rate, at least 64 KiB so one GSO
    # super-packet fits (otherwise htb under-delivers on veth/virtio links).
    burst = max(64 * 1024, int(rate_mbit * 1e6 / 8 * 0.002))
    return [
        _cmd(tc, f"qdisc add dev {iface} root handle 1: htb default 1"),
        _cmd(
            tc,
            f"class add dev {iface} parent 1: classid 1:1 htb rate {rate} ceil {rate} "
            f"burst {burst} cburst {burst}",
        ),
    ]


def _netem_limit(rate_bps: float | None, delay_ms: float) -> int:
    # netem holds rate x delay worth of packets; size its queue for full-size frames
    # with generous headroom (default limit 1000 drops packets above ~120 Mbit x 100 ms).
    if rate_bps is None:
        rate_bps = 10e9
    pkts = rate_bps * delay_ms / 1000.0 / (8 * 1500)
    return max(10000, int(pkts * 2) + 1000)


def plan(
    iface: str,
    delay_ms: float,
    rate_mbit: float,
    mode: str = "auto",
    relay_listen=None,
    relay_target=None,
    ingress_ifb: bool = True,
) -> Plan:
    """Validate the request and work out the commands; changes nothing."""
    try:
        delay_ms = float(delay_ms)
        rate_mbit = float(rate_mbit)
    except (TypeError, ValueError):
        raise ShapingError("delay and rate must be numbers") from None
    if not math.isfinite(rate_mbit) or rate_mbit <= 0:
        raise ShapingError(f"rate must be a positive number of Mbit/s, got {_num(rate_mbit)}")
    if rate_mbit > 1e6:
        raise ShapingError(f"rate {_num(rate_mbit)} Mbit/s is implausibly high (max 1000000)")
    if not math.isfinite(delay_ms) or delay_ms < 0:
        raise ShapingError(f"delay must be >= 0 ms, got {_num(delay_ms)}")
    if delay_ms > 60_000:
        raise ShapingError(f"delay {_num(delay_ms)} ms is implausibly high (max 60000)")
    if mode not in MODES:
        raise ShapingError(f"unknown mode {mode!r} (choose from {', '.join(MODES)})")
    listens = [parse_endpoint(x) for x in _as_list(relay_listen)]
    targets = [parse_endpoint(x) for x in _as_list(relay_target)]
    if len(listens) != len(targets):
        raise ShapingError("--relay-listen and --relay-target must be given together, in pairs")
    relays = list(zip(listens, targets, strict=True))
    _check_iface(iface)
    tc = _tc_bin()

    netem_ok, reason = netem_support()
    if mode == "netem" and not netem_ok and not reason.startswith("could not"):
        raise ShapingError(f"mode netem requested but the kernel has no netem ({reason})")
    resolved = mode
    if mode == "auto":
        resolved = "netem" if netem_ok else "htb"
    rate_txt = f"rate {_num(rate_mbit)} mbit via htb"
    relay_txt = ", ".join(f"{_fmt_endpoint(a)}->{_fmt_endpoint(b)}" for a, b in relays)
    commands = _htb_commands(tc, iface, rate_mbit)
    ifb = None
    if resolved == "netem":
        relay_delay = 0.0
        if delay_ms > 0:
            limit = _netem_limit(rate_mbit * 1e6, delay_ms)
            ip = _ip_bin()
            if ingress_ifb and ip:
                ifb = _ifb_name(iface)
                d = f"{_num(delay_ms)}ms"
                ifb_limit = _netem_limit(None, delay_ms)
                commands += [
                    _cmd(
                        tc,
                        f"qdisc add dev {iface} parent 1:1 handle 10: netem delay {d} "
                        f"limit {limit}",
                    ),
                    _cmd(ip, f"link add {ifb} type ifb"),
                    _cmd(ip, f"link set {ifb} up"),
                    _cmd(tc, f"qdisc add dev {ifb} root netem delay {d} limit {ifb_limit}"),
                    _cmd(tc, f"qdisc add dev {iface} handle ffff: ingress"),
                    _cmd(
                        tc,
                        f"filter add dev {iface} parent ffff: protocol all u32 match u32 "
                        f"0 0 action mirred egress redirect dev {ifb}",
                    ),
                ]
                delay_txt = (
                    f"one-way delay {_num(delay_ms)} ms via netem on egress and on "
                    f"ingress (ifb {ifb}), RTT +{_num(2 * delay_ms)} ms for all traffic"
                )
            else:
                d2 = f"{_num(2 * delay_ms)}ms"
                commands.append(
                    _cmd(
                        tc,
                        f"qdisc add dev {iface} parent 1:1 handle 10: netem delay {d2} "
                        f"limit {limit}",
                    )
                )
                delay_txt = (
                    f"one-way delay {_num(delay_ms)} ms via netem, applied as "
                    f"{_num(2 * delay_ms)} ms on egress (no ifb for ingress), "
                    f"RTT +{_num(2 * delay_ms)} ms for all traffic"
                )
        else:
            delay_txt = "no added delay"
        if relays:
            delay_txt += f"; relay {relay_txt} forwards without extra delay"
        why = "" if mode == "netem" else f" ({reason})"
    else:  # htb
        relay_delay = delay_ms
        if delay_ms > 0 and not relays:
            raise ShapingError(
                f"cannot add a {_num(delay_ms)} ms delay: "
                + (
                    "mode htb was asked for"
                    if mode == "htb"
                    else f"the kernel has no netem ({reason})"
                )
                + ", so the delay needs the userspace relay; pass --relay-listen HOST:PORT "
                "--relay-target HOST:PORT (or --delay-ms 0 for rate limiting only)"
            )
        if delay_ms > 0:
            delay_txt = (
                f"one-way delay {_num(delay_ms)} ms via userspace relay {relay_txt}, "
                f"RTT +{_num(2 * delay_ms)} ms through the relay only"
            )
        elif relays:
            delay_txt = f"no added delay; relay {relay_txt} forwards without delay"
        else:
            delay_txt = "no added delay"
        why = " (kernel has no netem)" if not netem_ok else " (htb mode requested)"
    description = f"shaped {iface} (mode {resolved}): {rate_txt}, {delay_txt}{why}"
    return Plan(
        iface,
        resolved,
        delay_ms,
        rate_mbit,
        relays,
        relay_delay,
        ifb,
        commands,
        description,
        reason,
    )


# --------------------------------------------------------------------------- state + relay


def _state_path(iface: str, state_dir) -> Path:
    return _state_dir(state_dir) / f"{_state_key(iface)}.json"


def _read_state(iface: str, state_dir) -> dict | None:
    try:
        return json.loads(_state_path(iface, state_dir).read_text())
    except (OSError, ValueError):
        return None


def _write_state(iface: str, state_dir, state: dict) -> None:
    path = _state_path(iface, state_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise ShapingError(f"cannot write state under {path.parent}: {exc}") from None


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _is_relay(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"delay_relay.py" in fh.read()
    except OSError:
        return False


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _stop_relay(pid: int) -> bool:
    """SIGTERM (then SIGKILL) the relay; False if it was not running."""
    if not pid or not _pid_alive(pid) or not _is_relay(pid):
        _reap(pid)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + RELAY_STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        _reap(pid)
        if not _pid_alive(pid):
            return True
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.05)
    _reap(pid)
    return True


def _start_relay(plan_: Plan, state_dir) -> tuple[int, str, str]:
    sdir = _state_dir(state_dir)
    key = _state_key(plan_.iface)
    pidfile = sdir / f"{key}.relay.pid"
    logfile = sdir / f"{key}.relay.log"
    with contextlib.suppress(OSError):
        pidfile.unlink()
    cmd = [
        sys.executable or "python3",
        str(RELAY_SCRIPT),
        "--delay-ms",
        _num(plan_.relay_delay_ms),
        "--pidfile",
        str(pidfile),
    ]
    for listen, target in plan_.relays:
        cmd += ["--listen", _fmt_endpoint(listen), "--target", _fmt_endpoint(target)]
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
    _stop_relay(proc.pid)
    raise ShapingError(f"delay relay did not start listening within {RELAY_START_TIMEOUT_S:g} s")


# --------------------------------------------------------------------------- apply / clear


def _teardown(iface: str, ifb: str | None) -> list[str]:
    """Remove PowerTrip qdiscs; returns what was removed.  Never raises for 'nothing there'."""
    tc = _tc_bin()
    removed = []
    for where in (["root"], ["ingress"]):
        proc = _run([tc, "qdisc", "del", "dev", iface, *where], check=False)
        if proc.returncode == 0:
            removed.append(f"removed {where[0]} qdisc")
        elif "not permitted" in (proc.stderr or "").lower():
            raise _CommandFailed(
                [tc, "qdisc", "del", "dev", iface, *where], proc.returncode, proc.stderr
            )
    if ifb:
        ip = _ip_bin()
        with contextlib.suppress(OSError):
            socket.if_nametoindex(ifb)
            if ip and _run([ip, "link", "del", ifb], check=False).returncode == 0:
                removed.append(f"removed ifb {ifb}")
    return removed


def apply(
    iface: str,
    delay_ms: float,
    rate_mbit: float,
    mode: str = "auto",
    relay_listen=None,
    relay_target=None,
    state_dir=None,
) -> str:
    """Shape ``iface``: egress rate ``rate_mbit`` and one-way delay ``delay_ms``.

    Replaces any previous PowerTrip shaping of the interface.  Returns the one-line
    description of what was done (mode included).  Raises ShapingError on any failure,
    after undoing whatever was already applied.
    """
    global _NETEM_CACHE
    ingress_ifb = True
    p = plan(iface, delay_ms, rate_mbit, mode, relay_listen, relay_target, ingress_ifb)
    clear(iface, state_dir)
    for _attempt in range(3):
        try:
            _execute(p, state_dir)
            return p.description
        except _CommandFailed as exc:
            _rollback(iface, p, state_dir)
            if exc.not_permitted:
                raise
            if exc.unknown_qdisc and "netem" in exc.cmd:
                if mode != "auto":
                    raise ShapingError(
                        f"mode netem requested but the kernel has no netem ({exc.stderr})"
                    ) from None
                # Detection said yes but the kernel refused netem: fall back to htb.
                _NETEM_CACHE = (False, f"adding netem failed: {exc.stderr}")
            elif p.ifb and ingress_ifb and (p.ifb in exc.cmd or "ingress" in exc.cmd):
                # No ifb/ingress redirect on this host: put the whole RTT on egress.
                ingress_ifb = False
            else:
                raise
            p = plan(iface, delay_ms, rate_mbit, mode, relay_listen, relay_target, ingress_ifb)
        except BaseException:
            _rollback(iface, p, state_dir)
            raise
    raise ShapingError(f"could not shape {iface}: no working mode")


def _execute(p: Plan, state_dir) -> None:
    state = {
        "iface": p.iface,
        "netns": _netns_id(),
        "mode": p.mode,
        "delay_ms": p.delay_ms,
        "rate_mbit": p.rate_mbit,
        "ifb": p.ifb,
        "relays": p.to_dict()["relays"],
        "relay": None,
        "description": p.description,
        "applied_at": time.time(),
    }
    # State first, so a rollback/clear can find everything we are about to create.
    _write_state(p.iface, state_dir, state)
    for cmd in p.commands:
        _run(cmd)
    if p.relays:
        pid, pidfile, logfile = _start_relay(p, state_dir)
        state["relay"] = {
            "pid": pid,
            "pidfile": pidfile,
            "log": logfile,
            "delay_ms": p.relay_delay_ms,
        }
        _write_state(p.iface, state_dir, state)


def _rollback(iface: str, p: Plan, state_dir) -> None:
    with contextlib.suppress(Exception):
        clear(iface, state_dir)
    with contextlib.suppress(Exception):
        _teardown(iface, p.ifb)


def clear(iface: str, state_dir=None) -> str:
    """Remove shaping from ``iface`` (root + ingress qdiscs, ifb, relay).  Returns a line."""
    state = _read_state(iface, state_dir)
    done = []
    if state and state.get("relay"):
        pid = int(state["relay"].get("pid") or 0)
        if _stop_relay(pid):
            done.append(f"stopped relay pid {pid}")
    exists = True
    try:
        _check_iface(iface)
    except ShapingError:
        exists = False
    if exists:
        done += _teardown(iface, (state or {}).get("ifb") or _ifb_name(iface))
    if state is not None:
        with contextlib.suppress(OSError):
            _state_path(iface, state_dir).unlink()
    if not exists:
        raise ShapingError(
            f"interface {iface!r} does not exist (in this network namespace)"
            + (f"; {', '.join(done)}" if done else "")
        )
    if not done:
        return f"cleared {iface}: nothing was shaped"
    return f"cleared {iface}: {', '.join(done)}"


def status(iface: str, state_dir=None) -> dict:
    """What is applied to ``iface``: recorded state, live qdiscs/classes, relay health."""
    _check_iface(iface)
    tc = _tc_bin()
    state = _read_state(iface, state_dir)
    qdiscs = _run([tc, "-s", "qdisc", "show", "dev", iface]).stdout
    classes = _run([tc, "class", "show", "dev", iface]).stdout
    relay_alive = None
    if state and state.get("relay"):
        pid = int(state["relay"].get("pid") or 0)
        relay_alive = _pid_alive(pid) and _is_relay(pid)
    kinds = [line.split()[1] for line in qdiscs.splitlines() if line.startswith("qdisc ")]
    netem_ok, reason = netem_support()
    return {
        "iface": iface,
        "shaped": state is not None,
        "state": state,
        "qdisc_kinds": kinds,
        "qdiscs": qdiscs,
        "classes": classes,
        "relay_alive": relay_alive,
        "kernel_netem": netem_ok,
        "kernel_netem_reason": reason,
    }


def describe_status(st: dict) -> str:
    iface = st["iface"]
    kinds = ",".join(dict.fromkeys(st["qdisc_kinds"])) or "none"
    if not st["shaped"]:
        if "htb" in st["qdisc_kinds"] or "netem" in st["qdisc_kinds"]:
            return f"{iface}: not shaped by PowerTrip, but has qdiscs {kinds}"
        return f"{iface}: not shaped (qdiscs: {kinds})"
    state = st["state"]
    line = state.get("description", "").replace(f"shaped {iface}", f"{iface}: shaped", 1)
    problems = []
    if "htb" not in st["qdisc_kinds"]:
        problems.append("htb qdisc MISSING")
    if state.get("mode") == "netem" and state.get("delay_ms") and "netem" not in st["qdisc_kinds"]:
        problems.append("netem qdisc MISSING")
    if state.get("relay"):
        pid = state["relay"]["pid"]
        problems.append(
            f"relay pid {pid} running" if st["relay_alive"] else f"relay pid {pid} NOT RUNNING"
        )
    return line + ("" if not problems else " [" + "; ".join(problems) + "]")


# --------------------------------------------------------------------------- CLI


def _shape_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Shape IFACE: egress rate limit plus one-way delay (RTT grows by "
        "2 x --delay-ms). Uses netem when the kernel has it, else htb + a userspace relay.",
    )
    p.add_argument("iface")
    p.add_argument(
        "--delay-ms",
        type=float,
        required=True,
        help="ONE-WAY delay in ms, added in each direction (RTT +2 x delay)",
    )
    p.add_argument("--rate-mbit", type=float, required=True, help="egress rate limit, Mbit/s")
    p.add_argument("--mode", choices=MODES, default="auto")
    p.add_argument(
        "--relay-listen",
        action="append",
        metavar="HOST:PORT",
        help="start the delay relay listening here (repeatable, paired with --relay-target)",
    )
    p.add_argument(
        "--relay-target", action="append", metavar="HOST:PORT", help="where the relay forwards to"
    )
    p.add_argument(
        "--state-dir",
        help=f"pidfile/state directory (default ${STATE_DIR_ENV} or {DEFAULT_STATE_DIR})",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the mode and the tc commands, change nothing"
    )
    return p


def _iface_parser(prog: str, what: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=what)
    p.add_argument("iface")
    p.add_argument("--state-dir")
    if "show" in prog:
        p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("shape", "clear", "show", "has-netem"):
        print("usage: shaping.py {shape,clear,show,has-netem} ...", file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    prog = f"tc/{cmd}"
    try:
        if cmd == "shape":
            args = _shape_parser(prog).parse_args(rest)
            if args.dry_run:
                p = plan(
                    args.iface,
                    args.delay_ms,
                    args.rate_mbit,
                    args.mode,
                    args.relay_listen,
                    args.relay_target,
                )
                print(f"dry run: {p.description}")
                for c in p.commands:
                    print("  " + " ".join(c))
                if p.relays:
                    print(
                        f"  {RELAY_SCRIPT.name} --delay-ms {_num(p.relay_delay_ms)} "
                        + " ".join(
                            f"--listen {_fmt_endpoint(a)} --target {_fmt_endpoint(b)}"
                            for a, b in p.relays
                        )
                    )
                return 0
            print(
                apply(
                    args.iface,
                    args.delay_ms,
                    args.rate_mbit,
                    args.mode,
                    args.relay_listen,
                    args.relay_target,
                    args.state_dir,
                ),
                flush=True,
            )
        elif cmd == "clear":
            args = _iface_parser(prog, "Remove PowerTrip shaping from IFACE.").parse_args(rest)
            print(clear(args.iface, args.state_dir), flush=True)
        elif cmd == "show":
            args = _iface_parser(prog, "Show the shaping of IFACE.").parse_args(rest)
            st = status(args.iface, args.state_dir)
            if args.json:
                print(json.dumps(st, indent=2))
            else:
                print(describe_status(st))
                print(
                    f"kernel netem: {'yes' if st['kernel_netem'] else 'no'} "
                    f"({st['kernel_netem_reason']})"
                )
                print(st["qdiscs"].rstrip())
                if st["classes"].strip():
                    print(st["classes"].rstrip())
        else:  # has-netem
            ok, reason = netem_support()
            print(f"netem: {'yes' if ok else 'no'} ({reason})")
            return 0 if ok else 1
    except ShapingError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
