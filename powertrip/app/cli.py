"""`powertrip`: run, compare, sweep, report, list policies, serve a service. This module
reads the command line (cliparser.py) and hands each command to the module that does it;
run, compare and sweep it runs here, with their exit codes (cliexit.py)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from powertrip.app.cliconfig import (
    config_command,
    explicit_settings,
    load_config,
    resolve_workload,
    resume_args,
)
from powertrip.app.cliexit import (
    EXIT_CHILD,
    EXIT_RUN_FAILED,
    EXIT_USAGE,
    interrupted,
    resume_hint,
)
from powertrip.app.cliflags import settle_rank_by
from powertrip.app.clioperators import (
    operate_command,
    provision_command,
    revoke_command,
    site_bundle_command,
)
from powertrip.app.cliparser import build_parser, reproduction_cli
from powertrip.core.config import ConfigError
from powertrip.core.kernels import KernelsError, pin_cpu_kernels


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    settle_rank_by(args)
    try:  # before anything trains, here or in a child: same seed, same numbers at any core count
        pin_cpu_kernels()
    except KernelsError as exc:
        print(f"powertrip: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "serve":
        os.execv(sys.executable, [sys.executable, "-m", f"services.{args.service}", *args.args])
    if args.command == "site-bundle":
        return site_bundle_command(args)
    if args.command == "provision":
        return provision_command(args)
    if args.command == "revoke":
        return revoke_command(args)
    if args.command == "completion":
        import shtab

        print(shtab.complete(build_parser(), shell=args.shell))
        return 0
    if args.command in ("ls", "status"):
        return operate_command(args)
    if args.command == "policies":
        if args.format == "json":
            from powertrip.core.policies import catalogue

            print(json.dumps(catalogue(), indent=2))
            return 0
        return subprocess.call([sys.executable, "-m", "services.policy", "--list-policies"])
    if args.command == "kernels":
        return _kernels(args)
    if args.command == "config":
        return config_command(args)
    if args.command == "logs":
        from powertrip.app.operate import follow_logs

        return follow_logs(Path(args.run), args.service, args.tail, args.follow)
    if args.command == "audit":
        return subprocess.call([sys.executable, "-m", "services.aggregator.audit", *args.args])
    if args.command == "report":
        return _report(args)
    if args.command == "data":
        from powertrip.app.experiments import datacmd

        return datacmd.main(args)
    gpus = getattr(args, "ray_gpus", 0.0) or 0.0
    if gpus < 0 or (gpus and not getattr(args, "ray", None)):
        why = "must be >= 0" if gpus < 0 else "asks Ray for GPUs: it needs --ray ADDRESS"
        print(f"powertrip {args.command}: --ray-gpus {gpus:g} {why}", file=sys.stderr)
        return EXIT_USAGE
    reproduction = reproduction_cli() if args.command == "reproduce" else None
    if reproduction is not None:  # the parser offers `reproduce` only where it is there
        args.argv = argv  # --jobs starts its helpers with the same arguments
        return reproduction.reproduce_command(args)
    from powertrip.app.experiments import commands
    from powertrip.app.experiments.launcher import LaunchError, stop_services_on_signals
    from powertrip.app.experiments.preflight import UnknownPolicy, preflight
    from powertrip.app.experiments.runner import ChildExited, RunError
    from powertrip.core.workloads import DataError, UnknownWorkload

    with stop_services_on_signals():
        try:
            if getattr(args, "resume", None):
                resume_args(args)
            config = load_config(args)
            args.explicit_settings = explicit_settings(args)
            config = resolve_workload(config)
            # every value checked before a directory is made or a service started
            preflight(config, args)
            if args.command in ("run", "compare", "sweep"):
                command = getattr(commands, args.command)
                if args.format != "json":
                    return command(config, args)
                return _as_json(command, config, args)
        except (ConfigError, UnknownWorkload, UnknownPolicy, DataError) as exc:
            print(f"powertrip: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except (ChildExited, LaunchError) as exc:
            print(f"powertrip: {exc}", file=sys.stderr)
            return EXIT_CHILD
        except RunError as exc:
            print(f"powertrip: {exc}", file=sys.stderr)
            return EXIT_RUN_FAILED
        except KeyboardInterrupt as exc:
            return interrupted("powertrip", exc, resume_hint(args))
    return EXIT_USAGE


def _as_json(command, config, args: argparse.Namespace) -> int:
    """`--format json`: the command's messages go to stderr, and stdout gets one JSON
    document at the end: the command, its output directory and every run's summary."""
    import contextlib

    args.results = []
    with contextlib.redirect_stdout(sys.stderr):
        code = command(config, args)
    print(json.dumps({"command": args.command, "out": args.out, "runs": args.results}, indent=2))
    return code


def _kernels(args: argparse.Namespace) -> int:
    """`powertrip kernels`: this CPU's kernel family and the thread-count check."""
    from powertrip.core import kernelcheck
    from powertrip.core.kernels import configure_torch

    configure_torch()
    prints = kernelcheck.fingerprints()
    families = kernelcheck.load_families()
    if args.record:
        name, entry = kernelcheck.record_entry(prints)
        families[name] = entry
        kernelcheck.FAMILIES_FILE.write_text(json.dumps(families, indent=1, sort_keys=True) + "\n")
        print(f"kernels: recorded family {name} in {kernelcheck.FAMILIES_FILE.name}")
    text, ok = kernelcheck.report(prints, families)
    if args.format == "json":
        print(
            json.dumps(
                {"ok": ok, "cpu": kernelcheck.cpu_identity(), "fingerprints": prints}, indent=1
            )
        )
    else:
        print(text)
    return 0 if ok else 1


def _report(args: argparse.Namespace) -> int:
    from powertrip.app.experiments.launcher import stop_services_on_signals
    from powertrip.app.report import ReportError, render

    with stop_services_on_signals():  # SIGTERM too ends in a message, not a kill
        try:
            path = render(Path(args.dir), args.rank_by)
        except ReportError as exc:
            print(f"powertrip report: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt as exc:
            hint = f"the runs are untouched; powertrip report {args.dir} draws the figures again"
            return interrupted("powertrip report", exc, hint)
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
