"""The command line behind ``tc/shape``, ``tc/clear``, ``tc/show`` (and ``has-netem``).

``main(["shape", IFACE, ...])`` prints one line and returns 0, or prints
``tc/<cmd>: error: <reason>`` on stderr and returns 1; it never reports shaping it did not
apply.  The scripts in ``tc/`` only choose the sub-command.
"""

from __future__ import annotations

import argparse
import json
import sys

from .actions import apply, clear, describe_status, status
from .commands import ShapingError, num
from .detect import netem_support
from .planning import MODES, fmt_endpoint, plan
from .relay import RELAY_SCRIPT
from .state import DEFAULT_STATE_DIR, STATE_DIR_ENV


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
    """Run one sub-command (``argv`` defaults to ``sys.argv[1:]``); the exit status."""
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
                        f"  {RELAY_SCRIPT.name} --delay-ms {num(p.relay_delay_ms)} "
                        + " ".join(
                            f"--listen {fmt_endpoint(a)} --target {fmt_endpoint(b)}"
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
