"""Doing the plan: apply it (rolling back on any failure), clear it, report on it.

``apply`` never leaves an interface half-shaped: whatever was applied before a failure is
removed again, and when the kernel refuses netem (``auto``) or ifb it retries with the
next best plan instead of giving up.
"""

from __future__ import annotations

import contextlib
import socket
import time

from .commands import CommandFailed, ShapingError, check_iface, ip_bin, run, tc_bin
from .detect import mark_netem_unusable, netem_support
from .planning import Endpoints, Plan, plan
from .relay import is_relay, pid_alive, start_relay, stop_relay
from .state import StateDir, ifb_name, netns_id, read_state, state_path, write_state


def _teardown(iface: str, ifb: str | None) -> list[str]:
    """Remove PowerTrip qdiscs; returns what was removed.  Never raises for 'nothing there'."""
    tc = tc_bin()
    removed = []
    for where in (["root"], ["ingress"]):
        proc = run([tc, "qdisc", "del", "dev", iface, *where], check=False)
        if proc.returncode == 0:
            removed.append(f"removed {where[0]} qdisc")
        elif "not permitted" in (proc.stderr or "").lower():
            raise CommandFailed(
                [tc, "qdisc", "del", "dev", iface, *where], proc.returncode, proc.stderr
            )
    if ifb:
        ip = ip_bin()
        with contextlib.suppress(OSError):
            socket.if_nametoindex(ifb)
            if ip and run([ip, "link", "del", ifb], check=False).returncode == 0:
                removed.append(f"removed ifb {ifb}")
    return removed


def apply(
    iface: str,
    delay_ms: float,
    rate_mbit: float,
    mode: str = "auto",
    relay_listen: Endpoints = None,
    relay_target: Endpoints = None,
    state_dir: StateDir = None,
) -> str:
    """Shape ``iface``: egress rate ``rate_mbit`` and one-way delay ``delay_ms``.

    Replaces any previous PowerTrip shaping of the interface.  Returns the one-line
    description of what was done (mode included).  Raises ShapingError on any failure,
    after undoing whatever was already applied.
    """
    ingress_ifb = True
    p = plan(iface, delay_ms, rate_mbit, mode, relay_listen, relay_target, ingress_ifb)
    clear(iface, state_dir)
    for _attempt in range(3):
        try:
            _execute(p, state_dir)
            return p.description
        except CommandFailed as exc:
            _rollback(iface, p, state_dir)
            if exc.not_permitted:
                raise
            if exc.unknown_qdisc and "netem" in exc.cmd:
                if mode != "auto":
                    raise ShapingError(
                        f"mode netem requested but the kernel has no netem ({exc.stderr})"
                    ) from None
                # Detection said yes but the kernel refused netem: fall back to htb.
                mark_netem_unusable(f"adding netem failed: {exc.stderr}")
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


def _execute(p: Plan, state_dir: StateDir) -> None:
    state = {
        "iface": p.iface,
        "netns": netns_id(),
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
    write_state(p.iface, state_dir, state)
    for cmd in p.commands:
        run(cmd)
    if p.relays:
        pid, pidfile, logfile = start_relay(p, state_dir)
        state["relay"] = {
            "pid": pid,
            "pidfile": pidfile,
            "log": logfile,
            "delay_ms": p.relay_delay_ms,
        }
        write_state(p.iface, state_dir, state)


def _rollback(iface: str, p: Plan, state_dir: StateDir) -> None:
    with contextlib.suppress(Exception):
        clear(iface, state_dir)
    with contextlib.suppress(Exception):
        _teardown(iface, p.ifb)


def clear(iface: str, state_dir: StateDir = None) -> str:
    """Remove shaping from ``iface`` (root + ingress qdiscs, ifb, relay).  Returns a line."""
    state = read_state(iface, state_dir)
    done = []
    if state and state.get("relay"):
        pid = int(state["relay"].get("pid") or 0)
        if stop_relay(pid):
            done.append(f"stopped relay pid {pid}")
    exists = True
    try:
        check_iface(iface)
    except ShapingError:
        exists = False
    if exists:
        done += _teardown(iface, (state or {}).get("ifb") or ifb_name(iface))
    if state is not None:
        with contextlib.suppress(OSError):
            state_path(iface, state_dir).unlink()
    if not exists:
        raise ShapingError(
            f"interface {iface!r} does not exist (in this network namespace)"
            + (f"; {', '.join(done)}" if done else "")
        )
    if not done:
        return f"cleared {iface}: nothing was shaped"
    return f"cleared {iface}: {', '.join(done)}"


def status(iface: str, state_dir: StateDir = None) -> dict:
    """What is applied to ``iface``: recorded state, live qdiscs/classes, relay health."""
    check_iface(iface)
    tc = tc_bin()
    state = read_state(iface, state_dir)
    qdiscs = run([tc, "-s", "qdisc", "show", "dev", iface]).stdout
    classes = run([tc, "class", "show", "dev", iface]).stdout
    relay_alive = None
    if state and state.get("relay"):
        pid = int(state["relay"].get("pid") or 0)
        relay_alive = pid_alive(pid) and is_relay(pid)
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
    """The summary line of ``tc/show``: the applied shaping and what is missing or dead."""
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
