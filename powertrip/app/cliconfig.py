"""A run's configuration from the command line: the --config file, the flags, --param and
--set in that order, each value checked as the YAML file's and named by its source; which
settings the user chose; `run --resume`'s stored configuration; and `powertrip config
show|validate`, which prints or checks what `run` would use."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import yaml

from powertrip.app.cliexit import EXIT_USAGE
from powertrip.app.cliflags import FLAG_FIELDS
from powertrip.app.settingstable import markdown_table, text_table
from powertrip.core import runfiles
from powertrip.core.config import (
    PARAM_PREFIX,
    ConfigError,
    RunConfig,
    parse_setting,
)
from powertrip.core.policies.base import param_number
from powertrip.core.settings import later_settings


def load_config(args: argparse.Namespace) -> RunConfig:
    """The configuration a command's arguments describe, validated (ConfigError if not)."""
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


def resume_args(args: argparse.Namespace) -> None:
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
            for key, then in later_settings(RunConfig).items()
            if key not in stored and then != getattr(today, key)
        ]


def resolve_workload(config: RunConfig) -> RunConfig:
    """The workload's defaults filled in, once its data is known to be there."""
    from powertrip.core.workloads import get_workload

    workload = get_workload(config.workload, config.peft)
    workload.check_data(config.data_dir)
    return config.resolved(workload.defaults)


def config_command(args: argparse.Namespace) -> int:
    """`powertrip config show|validate|settings`: the configuration `run` would use and its
    sources, or the table of every setting."""
    from powertrip.core.workloads import DataError, UnknownWorkload

    if args.config_command == "settings":
        print(markdown_table() if args.format == "markdown" else text_table(), end="")
        return 0
    try:
        config = load_config(args)
        if args.env:
            config = config.with_environment(dict(os.environ)).validate()
        resolved = resolve_workload(config)
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
