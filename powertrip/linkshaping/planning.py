"""From a link profile (one-way delay, rate, mode, relays) to a :class:`Plan`.

A plan is the list of ``tc``/``ip`` commands, the relays to start and the one line that
says what the shaping will do.  Making one changes nothing (``tc/shape --dry-run`` prints
it); it does read the system: the interface must exist, ``tc`` must be installed, and
``auto`` asks :mod:`.detect` whether the kernel has netem.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from .commands import ShapingError, check_iface, ip_bin, num, tc_bin
from .detect import netem_support
from .state import ifb_name

MODES = ("auto", "netem", "htb")

Endpoint = tuple[str, int]
Endpoints = str | Iterable[str] | None  # "HOST:PORT" or several


def parse_endpoint(text: str) -> Endpoint:
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


def fmt_endpoint(ep: Endpoint) -> str:
    """(host, port) -> ``HOST:PORT``, brackets around an IPv6 host."""
    host, port = ep
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _as_list(value: Endpoints) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


@dataclasses.dataclass
class Plan:
    """What ``apply`` will do; ``description`` is the line ``tc/shape`` prints."""

    iface: str
    mode: str  # "netem" or "htb" (resolved)
    delay_ms: float
    rate_mbit: float
    relays: list[tuple[Endpoint, Endpoint]]
    relay_delay_ms: float
    ifb: str | None
    commands: list[list[str]]
    description: str
    netem_reason: str = ""

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["relays"] = [[fmt_endpoint(a), fmt_endpoint(b)] for a, b in self.relays]
        return d


def _cmd(binary: str, args: str) -> list[str]:
    """[binary, *words]; safe because interface names are validated (no spaces)."""
    return [binary, *args.split()]


def _htb_commands(tc: str, iface: str, rate_mbit: float) -> list[list[str]]:
    rate = f"{num(rate_mbit)}mbit"
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
    relay_listen: Endpoints = None,
    relay_target: Endpoints = None,
    ingress_ifb: bool = True,
) -> Plan:
    """Validate the request and work out the commands; changes nothing."""
    try:
        delay_ms = float(delay_ms)
        rate_mbit = float(rate_mbit)
    except (TypeError, ValueError):
        raise ShapingError("delay and rate must be numbers") from None
    if not math.isfinite(rate_mbit) or rate_mbit <= 0:
        raise ShapingError(f"rate must be a positive number of Mbit/s, got {num(rate_mbit)}")
    if rate_mbit > 1e6:
        raise ShapingError(f"rate {num(rate_mbit)} Mbit/s is implausibly high (max 1000000)")
    if not math.isfinite(delay_ms) or delay_ms < 0:
        raise ShapingError(f"delay must be >= 0 ms, got {num(delay_ms)}")
    if delay_ms > 60_000:
        raise ShapingError(f"delay {num(delay_ms)} ms is implausibly high (max 60000)")
    if mode not in MODES:
        raise ShapingError(f"unknown mode {mode!r} (choose from {', '.join(MODES)})")
    listens = [parse_endpoint(x) for x in _as_list(relay_listen)]
    targets = [parse_endpoint(x) for x in _as_list(relay_target)]
    if len(listens) != len(targets):
        raise ShapingError("--relay-listen and --relay-target must be given together, in pairs")
    relays = list(zip(listens, targets, strict=True))
    check_iface(iface)
    tc = tc_bin()

    netem_ok, reason = netem_support()
    if mode == "netem" and not netem_ok and not reason.startswith("could not"):
        raise ShapingError(f"mode netem requested but the kernel has no netem ({reason})")
    resolved = mode
    if mode == "auto":
        resolved = "netem" if netem_ok else "htb"
    rate_txt = f"rate {num(rate_mbit)} mbit via htb"
    relay_txt = ", ".join(f"{fmt_endpoint(a)}->{fmt_endpoint(b)}" for a, b in relays)
    commands = _htb_commands(tc, iface, rate_mbit)
    ifb = None
    if resolved == "netem":
        relay_delay = 0.0
        if delay_ms > 0:
            limit = _netem_limit(rate_mbit * 1e6, delay_ms)
            ip = ip_bin()
            if ingress_ifb and ip:
                ifb = ifb_name(iface)
                d = f"{num(delay_ms)}ms"
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
                    f"one-way delay {num(delay_ms)} ms via netem on egress and on "
                    f"ingress (ifb {ifb}), RTT +{num(2 * delay_ms)} ms for all traffic"
                )
            else:
                d2 = f"{num(2 * delay_ms)}ms"
                commands.append(
                    _cmd(
                        tc,
                        f"qdisc add dev {iface} parent 1:1 handle 10: netem delay {d2} "
                        f"limit {limit}",
                    )
                )
                delay_txt = (
                    f"one-way delay {num(delay_ms)} ms via netem, applied as "
                    f"{num(2 * delay_ms)} ms on egress (no ifb for ingress), "
                    f"RTT +{num(2 * delay_ms)} ms for all traffic"
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
                f"cannot add a {num(delay_ms)} ms delay: "
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
                f"one-way delay {num(delay_ms)} ms via userspace relay {relay_txt}, "
                f"RTT +{num(2 * delay_ms)} ms through the relay only"
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
