"""`powertrip`: run, compare, sweep, report, list policies, serve a service."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from powertrip.app.cliflags import FLAG_FIELDS
from powertrip.app.cliparser import build_parser
from powertrip.core import runfiles
from powertrip.core.config import (
    LATER_SETTINGS,
    PARAM_PREFIX,
    ConfigError,
    RunConfig,
    parse_setting,
)
from powertrip.core.kernels import KernelsError, pin_cpu_kernels
from powertrip.core.policies.base import param_number

#: exit codes of run, compare, sweep and reproduce: 0 done; 1 a run failed (its summary says
#: why); 2 bad usage or configuration, found before anything starts; 3 a service or site
#: worker exited before the run was over (the message names it and shows its log's last
#: lines); 128 + the signal when SIGINT (130) or SIGTERM (143) stopped it
EXIT_RUN_FAILED = 1
EXIT_USAGE = 2
EXIT_CHILD = 3


def load_config(args: argparse.Namespace) -> RunConfig:
    config = RunConfig.from_yaml(args.config) if args.config else RunConfig()
    overrides = {name: getattr(args, name, None) for name in FLAG_FIELDS}
    flags: dict[str, str] = {}  # a setting given by another flag than its own
    budget = getattr(args, "time_budget_h", None)
    if budget is not None:
        if budget < 0:
            raise ConfigError(f"--time-budget-h: must be >= 0 (0 = no time budget), got {budget}")
        given = overrides["max_sim_hours"]
        if given is not None and given != budget:
            raise ConfigError(
                f"--time-budget-h {budget:g} and --max-sim-hours {given:g} disagree; give one"
            )
        overrides["max_sim_hours"] = budget
        flags["max_sim_hours"] = "--time-budget-h"
    # YAML < flags < --param < --set, every value through the YAML file's checks, a bad one
    # named by its source (the file, the flag, --set)
    config = config.with_overrides(flags, **overrides)
    for item in getattr(args, "param", []) or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--param {item!r}: expected NAME=VALUE")
        try:
            config.policy_params[name.strip()] = param_number(name.strip(), value)
        except ValueError as exc:
            raise ConfigError(f"--param {exc}") from None
    config = config.with_settings(getattr(args, "settings", None) or [])
    return config.validate()


def explicit_settings(args: argparse.Namespace) -> frozenset[str]:
    """RunConfig fields the user chose, by a flag or a key in the --config YAML, as opposed to
    defaults: compare and sweep replace the default round cap and time budget, never chosen
    ones (configs/demo.yaml's max_rounds, for one)."""
    chosen = {name for name in FLAG_FIELDS if getattr(args, name, None) is not None}
    if getattr(args, "time_budget_h", None) is not None:
        chosen.add("max_sim_hours")
    for item in getattr(args, "settings", None) or []:
        key = parse_setting(item)[0]
        chosen.add("policy_params" if key.startswith(PARAM_PREFIX) else key)
    if getattr(args, "config", None):
        try:
            data = yaml.safe_load(Path(args.config).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:  # load_config has already read it
            raise ConfigError(f"cannot read config file {args.config}: {exc}") from exc
        if isinstance(data, dict):
            chosen.update(str(key) for key in data)
    return frozenset(chosen)


def _resume_args(args: argparse.Namespace) -> None:
    """`run --resume DIR` takes DIR's run-config.yaml; other run flags would change the run."""
    out = Path(args.resume)
    config = out / runfiles.REQUESTED_CONFIG
    if not config.is_file():
        raise ConfigError(f"--resume {out}: no run-config.yaml there (not a run directory?)")
    ignored = {"resume", "quiet", "command", "param", "out", "format"}
    given = [
        "--set" if k == "settings" else f"--{k.replace('_', '-')}"
        for k, v in vars(args).items()
        if k not in ignored and v not in (None, [], False)
    ]
    if given or args.param or (args.out and Path(args.out) != out):
        raise ConfigError(
            f"--resume takes the configuration from {config}; drop {', '.join(given) or '--out'}"
        )
    args.config, args.out = str(config), str(out)
    # a run stored before a setting existed goes on as it started: with what the setting's
    # absence meant then (fused_sgd: false), not with today's default
    try:
        stored = yaml.safe_load(config.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"--resume: cannot read {config}: {exc}") from exc
    if isinstance(stored, dict):
        today = RunConfig()
        args.settings = [
            f"{key}={json.dumps(then)}"
            for key, then in LATER_SETTINGS.items()
            if key not in stored and then != getattr(today, key)
        ]


def _resolve_workload(config: RunConfig) -> RunConfig:
    from powertrip.core.workloads import get_workload

    workload = get_workload(config.workload, config.peft)
    workload.check_data(config.data_dir)
    return config.resolved(workload.defaults)


def _site_bundle(args: argparse.Namespace) -> int:
    """`powertrip site-bundle`: write one remote site's bundle, list what it holds."""
    from powertrip.app.sitebundle import RUN_SCRIPT, BundleError, BundleSpec, make_bundle

    extra = []
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("POWERTRIP_"):
            print(f"powertrip: --env {item!r}: expected POWERTRIP_NAME=VALUE", file=sys.stderr)
            return EXIT_USAGE
        extra.append((name, value))
    site_token = ""
    if args.site_tokens:
        from powertrip.core.config import ConfigError
        from powertrip.rpc.sitetokens import load_site_tokens

        try:
            tokens = load_site_tokens(args.site_tokens)
        except ConfigError as exc:
            print(f"powertrip: site-bundle: --site-tokens: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if args.site not in tokens:
            print(
                f"powertrip: site-bundle: --site-tokens {args.site_tokens} has no token for "
                f"--site {args.site!r}",
                file=sys.stderr,
            )
            return EXIT_USAGE
        site_token = tokens[args.site]
    spec = BundleSpec(
        secrets=Path(args.secrets),
        out=Path(args.out),
        aggregator=args.aggregator,
        profiler=args.profiler,
        site=args.site,
        name=args.name,
        image=args.image,
        gpus=args.gpus,
        threads=args.threads,
        extra_env=tuple(extra),
        site_token=site_token,
    )
    try:
        files = make_bundle(spec)
    except BundleError as exc:
        print(f"powertrip: site-bundle: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"bundle for worker {spec.worker} in {spec.out}: {', '.join(f.name for f in files)}")
    print(f"on the site's machine: sh {spec.out.name}/{RUN_SCRIPT}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:  # before anything trains, here or in a child: same seed, same numbers on any x86-64
        pin_cpu_kernels()
    except KernelsError as exc:
        print(f"powertrip: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "serve":
        os.execv(sys.executable, [sys.executable, "-m", f"services.{args.service}", *args.args])
    if args.command == "site-bundle":
        return _site_bundle(args)
    if args.command == "provision":
        return _provision(args)
    if args.command == "revoke":
        return _revoke(args)
    if args.command == "completion":
        import shtab

        print(shtab.complete(build_parser(), shell=args.shell))
        return 0
    if args.command in ("ls", "status"):
        return _operate(args)
    if args.command == "policies":
        if args.format == "json":
            from powertrip.core.policies import catalogue

            print(json.dumps(catalogue(), indent=2))
            return 0
        return subprocess.call([sys.executable, "-m", "services.policy", "--list-policies"])
    if args.command == "config":
        return _config(args)
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
    if args.command == "reproduce":
        args.argv = argv  # --jobs starts its helpers with the same arguments
        return _reproduce_main(args)
    from powertrip.app.experiments import commands
    from powertrip.app.experiments.launcher import LaunchError, stop_services_on_signals
    from powertrip.app.experiments.preflight import UnknownPolicy, preflight
    from powertrip.app.experiments.runner import ChildExited, RunError
    from powertrip.core.workloads import DataError, UnknownWorkload

    with stop_services_on_signals():
        try:
            if getattr(args, "resume", None):
                _resume_args(args)
            config = load_config(args)
            args.explicit_settings = explicit_settings(args)
            config = _resolve_workload(config)
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
            return _interrupted("powertrip", exc, _resume_hint(args))
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


def _config(args: argparse.Namespace) -> int:
    """`powertrip config show|validate`: the configuration `run` would use, and its sources."""
    from powertrip.core.workloads import DataError, UnknownWorkload

    try:
        config = load_config(args)
        if args.env:
            config = config.with_environment(dict(os.environ)).validate()
        resolved = _resolve_workload(config)
    except (ConfigError, DataError, UnknownWorkload) as exc:
        print(f"powertrip config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.config_command == "validate":
        print(f"valid: {resolved.policy} on {resolved.workload}, {resolved.num_sites} sites")
        return 0
    values = resolved.to_dict()
    sources = config.sources()
    origin = {k: sources.get(k, "workload default" if k in _filled(config, resolved) else
                             "default") for k in values}  # fmt: skip
    if args.format == "json":
        print(json.dumps({"config": values, "sources": origin}, indent=2))
        return 0
    for key, value in values.items():
        text = yaml.safe_dump({key: value}, default_flow_style=True, width=10**6).strip()
        print(f"{text[1:-1]}  # {origin[key]}")
    return 0


def _filled(given: RunConfig, resolved: RunConfig) -> set[str]:
    """Settings the workload's defaults filled in (left unset by every source)."""
    a, b = given.to_dict(), resolved.to_dict()
    return {k for k in b if a.get(k) != b[k]}


def _provision(args: argparse.Namespace) -> int:
    """`powertrip provision`: every site's bundle and the aggregator's token file."""
    from powertrip.app.provision import TOKENS_FILE, ProvisionError, load_plan, provision

    try:
        plan = load_plan(Path(args.sites_file))
        bundles = provision(plan, Path(args.secrets), Path(args.out))
    except ProvisionError as exc:
        print(f"powertrip provision: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out)
    print(f"{plan.deployment}: {len(bundles)} site bundle(s) in {out}: {', '.join(bundles)}")
    print(
        f"aggregator: --site-tokens {out / 'aggregator' / TOKENS_FILE} --site-certs "
        "(each site's token and certificate are its own; copy each bundle privately)"
    )
    return 0


def _revoke(args: argparse.Namespace) -> int:
    """`powertrip revoke`: append sites and certificates to the revocation list."""
    from powertrip.core.config import ConfigError
    from powertrip.rpc.certificates import add_revocation, certificate_file_facts

    if not args.site and not args.cert:
        print("powertrip revoke: name a --site or a --cert to revoke", file=sys.stderr)
        return EXIT_USAGE
    try:
        certs = [certificate_file_facts(path) for path in args.cert]
        revoked = add_revocation(args.revocation_list, args.site, [c.fingerprint for c in certs])
    except ConfigError as exc:
        print(f"powertrip revoke: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for site in args.site:
        print(f"revoked site {site} (every certificate that names it)")
    for path, cert in zip(args.cert, certs, strict=True):
        names = ", ".join(sorted(cert.names))
        print(f"revoked certificate {path} (sha256 {cert.fingerprint}, names {names})")
    print(
        f"{args.revocation_list}: {len(revoked.sites)} site(s), {len(revoked.certificates)} "
        "certificate(s); an aggregator started with --revoked on this file refuses them "
        "within a second"
    )
    return 0


def _operate(args: argparse.Namespace) -> int:
    """`ls` and `status`: 0 with the answer; 2 for a directory that is not there; 1 when
    the aggregator cannot be reached or refuses."""
    from powertrip.app import operate
    from powertrip.rpc.tls import TlsError, load_tls

    try:
        if args.command == "ls":
            print(operate.ls_output(Path(args.dir), args.format))
            return 0
        try:
            tls = load_tls(args)
        except TlsError as exc:
            print(f"powertrip status: {exc}", file=sys.stderr)
            return EXIT_USAGE
        credentials = tls.channel_credentials() if tls else None
        status = operate.status_of(args.address, credentials, args.timeout_s)
    except operate.OperateError as exc:
        print(f"powertrip {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE if args.command == "ls" else EXIT_RUN_FAILED
    print(operate.dumps(status) if args.format == "json" else operate.status_lines(status))
    return 0


def _resume_hint(args: argparse.Namespace) -> str:
    """How to pick up what a signal interrupted (commands.run records its --out)."""
    if args.command in ("compare", "sweep") and getattr(args, "ray", None):
        return (
            "the Ray tasks were cancelled; run the same command again to continue: finished "
            "runs are reused and the others made again"
        )
    if args.command in ("compare", "sweep"):
        return (
            "run the same command again to continue: finished runs are reused and the "
            "interrupted one resumed from its checkpoint"
        )
    if args.command == "reproduce":
        return "run the same command again to continue: finished runs are kept"
    out = Path(args.out) if getattr(args, "out", None) else None
    if out is None or not (out / runfiles.REQUESTED_CONFIG).is_file():
        return ""
    if (out / runfiles.CHECKPOINT_DIR).is_dir():
        return f"the run can be resumed with powertrip run --resume {out}"
    return f"no checkpoint was written yet in {out}: run it again to start over"


def _report(args: argparse.Namespace) -> int:
    from powertrip.app.experiments.launcher import stop_services_on_signals
    from powertrip.app.report import ReportError, render

    with stop_services_on_signals():  # SIGTERM too ends in a message, not a kill
        try:
            path = render(Path(args.dir), args.objective)
        except ReportError as exc:
            print(f"powertrip report: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt as exc:
            hint = f"the runs are untouched; powertrip report {args.dir} draws the figures again"
            return _interrupted("powertrip report", exc, hint)
    print(f"report: {path}")
    return 0


def _interrupted(prog: str, exc: KeyboardInterrupt, hint: str) -> int:
    """SIGTERM or SIGINT (Ctrl-C): stop whatever service is left, say what was stopped and
    how to go on, exit 128 + the signal (130 for SIGINT, 143 for SIGTERM)."""
    import signal

    from powertrip.app.experiments.launcher import Interrupted, stop_all

    stopped = list(exc.stopped) if isinstance(exc, Interrupted) else []
    stopped += [name for name in stop_all() if name not in stopped]
    signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
    what = ""
    if stopped:
        what = f": stopped {len(stopped)} service{'' if len(stopped) == 1 else 's'}"
        what += f" ({', '.join(stopped)})"
    print(
        f"{prog}: interrupted by {signal.Signals(signum).name}{what}"
        + (f"; {hint}" if hint else ""),
        file=sys.stderr,
    )
    return 128 + signum


def _reproduce_main(args: argparse.Namespace) -> int:
    from powertrip.app.experiments import reproduce
    from powertrip.app.experiments.launcher import LaunchError, stop_services_on_signals
    from powertrip.app.experiments.runner import ChildExited, RunError
    from powertrip.app.report import ReportError
    from powertrip.core.workloads import DataError, UnknownWorkload

    with stop_services_on_signals():
        try:
            with tempfile.TemporaryDirectory(prefix="powertrip-reproduce-") as tmp:
                if args.settings:
                    args.config = str(_reproduce_config(args, Path(tmp) / "reproduce-config.yaml"))
                return reproduce.main(args)
        except (
            ConfigError,
            reproduce.ReproduceError,
            UnknownWorkload,
            DataError,
            ReportError,
        ) as exc:
            print(f"powertrip reproduce: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except (ChildExited, LaunchError) as exc:
            print(f"powertrip reproduce: {exc}", file=sys.stderr)
            return EXIT_CHILD
        except RunError as exc:  # --ray: a group's task failed twice
            print(f"powertrip reproduce: {exc}", file=sys.stderr)
            return EXIT_RUN_FAILED
        except KeyboardInterrupt as exc:
            return _interrupted("powertrip reproduce", exc, _resume_hint(args))


def _reproduce_config(args: argparse.Namespace, path: Path) -> Path:
    """`reproduce --set`: the base configuration file with the --set values written into it
    (reproduce reads its base from a file, then applies its own flags). A --set of a setting
    that one of reproduce's flags then replaces is refused rather than silently lost."""
    from powertrip.app.experiments import reproduce
    from powertrip.app.experiments.suite import WORKLOAD_FIELDS

    source = Path(args.config) if args.config else reproduce.DEFAULT_CONFIG
    config = RunConfig.from_yaml(source).with_settings(args.settings).validate()
    later = {
        "workload": args.workload and "--workload",
        "num_sites": args.sites and "--sites",
        "workers": args.workers and "--workers",
        "data_dir": args.data_dir and "--data-dir",
    }
    if args.workload and args.workload != "femnist":
        later.update(dict.fromkeys(WORKLOAD_FIELDS, "--workload"))
    if args.quick:
        later.update(dict.fromkeys(reproduce.QUICK_OVERRIDES, "--quick"))
    data = yaml.safe_load(source.read_text()) or {}
    for item in args.settings:
        key = parse_setting(item)[0]
        key = "policy_params" if key.startswith(PARAM_PREFIX) else key
        if later.get(key):
            raise ConfigError(
                f"--set {item}: reproduce's {later[key]} sets {key} after the configuration; "
                f"give {key} one way"
            )
        data[key] = getattr(config, key)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


if __name__ == "__main__":
    sys.exit(main())
