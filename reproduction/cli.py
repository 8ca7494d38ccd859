"""`powertrip reproduce`: the paper's evaluation (reproduction/reproduce.py)
with the CLI's exit codes and messages, and `reproduce --set` written into the base
configuration file that reproduce reads."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

from powertrip.app.cliexit import (
    EXIT_CHILD,
    EXIT_RUN_FAILED,
    EXIT_USAGE,
    interrupted,
    resume_hint,
)
from powertrip.core.config import PARAM_PREFIX, ConfigError, RunConfig, parse_setting


def reproduce_command(args: argparse.Namespace) -> int:
    """`powertrip reproduce`, its errors as one line and an exit code (cliexit.py)."""
    from powertrip.app.experiments.launcher import LaunchError, stop_services_on_signals
    from powertrip.app.experiments.runner import ChildExited, RunError
    from powertrip.app.report import ReportError
    from powertrip.core.workloads import DataError, UnknownWorkload
    from reproduction import reproduce

    with stop_services_on_signals():
        try:
            with tempfile.TemporaryDirectory(prefix="powertrip-reproduce-") as tmp:
                if args.settings:
                    args.config = str(reproduce_config(args, Path(tmp) / "reproduce-config.yaml"))
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
            return interrupted("powertrip reproduce", exc, resume_hint(args))


def reproduce_config(args: argparse.Namespace, path: Path) -> Path:
    """`reproduce --set`: the base configuration file with the --set values written into it
    (reproduce reads its base from a file, then applies its own flags). A --set of a setting
    that one of reproduce's flags then replaces is refused rather than silently lost."""
    from powertrip.app.experiments.suite import WORKLOAD_FIELDS
    from reproduction import reproduce

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
