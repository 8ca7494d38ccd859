"""What `run`, `compare` and `sweep` will run, checked before they make a directory or start
a service: the policies and their parameters, `--k`, `--budget-factor`, the site count
against the data and `--out`. A mistake then costs a message and exit 2, not a half-made
run directory or a service that dies on start-up."""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from powertrip.app.experiments.reuse import check_run_dir
from powertrip.core.config import ConfigError, RunConfig
from powertrip.core.policies.base import param_number

#: The paper's comparison (§5.3, Fig. 9), PowerTrip first so its time sets the budget.
DEFAULT_COMPARISON = (
    "powertrip",
    "static",
    "centralized-25",
    "centralized-50",
    "highest-power",
    "lowest-latency",
    "random",
    "radius",
    "all",
)


class UnknownPolicy(ValueError):
    pass


@dataclass(frozen=True)
class PolicySpec:
    """One entry of `compare --policies`: a policy name, optionally with its own parameters
    after a colon (`static:k=3`, `adaptive:probe_cost=0.2:fit_rounds=16`), so one comparison
    can hold a policy twice with different parameters. The text is the row's label."""

    text: str
    policy: str
    params: dict[str, float]

    @property
    def dirname(self) -> str:
        """The run directory: the name alone, or `static-k3` for `static:k=3`."""
        parts = [self.policy, *(f"{k}{v:g}" for k, v in self.params.items())]
        return "-".join(parts)


def parse_policy_spec(text: str) -> PolicySpec:
    name, *pairs = text.split(":")
    params: dict[str, float] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UnknownPolicy(
                f"--policies: {text!r}: a parameter is written NAME=VALUE after a colon, "
                f"e.g. static:k=3"
            )
        try:
            params[key.strip()] = param_number(key.strip(), value)
        except ValueError as exc:
            raise UnknownPolicy(f"--policies: {text!r}: {exc}") from None
    return PolicySpec(text, name.strip(), params)


def compare_policies(args: argparse.Namespace) -> list[PolicySpec]:
    """The policies `compare` runs, in order (--policies or the paper's set)."""
    text = args.policies if args.policies is not None else ",".join(DEFAULT_COMPARISON)
    policies = list(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if not policies:
        raise UnknownPolicy(f"--policies: no policy named in {text!r}; see `powertrip policies`")
    return [parse_policy_spec(p) for p in policies]


def sweep_ks(args: argparse.Namespace, config: RunConfig) -> list[int]:
    """`sweep --k` as integers, each a possible site count."""
    try:
        ks = [int(k) for k in args.k.split(",") if k.strip()]
    except ValueError:
        raise UnknownPolicy(f"--k must be comma-separated integers, got {args.k!r}") from None
    bad = [k for k in ks if not 1 <= k <= config.num_sites]
    if bad or not ks:
        raise UnknownPolicy(
            f"--k values must be in 1..{config.num_sites} (the site count), got {bad or args.k!r}"
        )
    return ks


def check_policy_names(
    names: Collection[str], params: Collection[str] | Mapping[str, float] = ()
) -> None:
    """Every policy exists and takes every parameter given, by the policy catalogue
    that the policy service serves (powertrip.core.policies), read before it starts; given
    as a mapping, each value is checked too, as the policy checks it when it is built."""
    from powertrip.core.policies import REGISTRY, SERVICE_PARAMS, PolicyError

    unknown = [name for name in names if name not in REGISTRY]
    if unknown:
        raise UnknownPolicy(
            f"unknown policy {', '.join(unknown)}; valid policies: {', '.join(REGISTRY)}"
        )
    for name in names:
        allowed = {*REGISTRY[name].Params.names(), *SERVICE_PARAMS}
        extra = sorted(set(params) - allowed)
        if extra:
            raise UnknownPolicy(
                f"policy {name!r}: unknown parameter(s) {', '.join(extra)}; allowed: "
                f"{', '.join(sorted(allowed))}"
            )
        if isinstance(params, Mapping):
            try:
                REGISTRY[name]({k: v for k, v in params.items() if k not in SERVICE_PARAMS})
            except PolicyError as exc:
                raise UnknownPolicy(str(exc)) from None


def check_sites(config: RunConfig) -> None:
    """A partition needs a training sample per site: the check the site workers make when
    they split the data, made from the workload's metadata before anything starts."""
    from powertrip.app.experiments.datacmd import training_samples
    from powertrip.core.workloads import get_workload

    available = training_samples(get_workload(config.workload), config.data_dir)
    if available is not None and config.num_sites > available:
        raise ConfigError(
            f"num_sites (--sites): {config.num_sites} is larger than the {available} training "
            f"samples of workload {config.workload}; at most {available} (one sample per site)"
        )


def preflight(config: RunConfig, args: argparse.Namespace) -> None:
    """Check what the command will run before it makes a directory or starts a service:
    policies and their parameters, --k, --budget-factor, the site count against the data,
    and that --out can be a directory. Raises UnknownPolicy or ConfigError."""
    command = args.command
    params = dict(config.policy_params)
    if command == "run":
        check_policy_names([config.policy], params)
    elif command == "compare":
        for spec in compare_policies(args):
            check_policy_names([spec.policy], {**params, **spec.params})
        if args.budget_factor is not None and args.budget_factor < 0:
            raise ConfigError(
                f"--budget-factor: must be >= 0 (0 = no cut-off), got {args.budget_factor:g}"
            )
    elif command == "sweep":
        check_policy_names(["static"], {**params, "k": sweep_ks(args, config)[0]})
    check_sites(config)
    out = getattr(args, "out", None)
    if out and Path(out).exists() and not Path(out).is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory")
    if out and command in ("compare", "sweep"):
        names = (
            [spec.dirname for spec in compare_policies(args)]
            if command == "compare"
            else [f"k{k}" for k in sweep_ks(args, config)]
        )
        for name in names:
            check_run_dir(Path(out) / name)
