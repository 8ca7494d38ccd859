"""Container entry point: `python /app/deploy/entrypoint.py services.NAME [ARGS...]`.

Builds the run configuration every service of a deployment shares from the environment
(compose's `.env`): an optional YAML (POWERTRIP_RUN_CONFIG) overridden field by field by
POWERTRIP_RUN_<FIELD> (e.g. POWERTRIP_RUN_WORKLOAD=synthetic, POWERTRIP_RUN_NUM_SITES=4,
POWERTRIP_RUN_CLOCK=wall), validates it, writes it where `--config` / POWERTRIP_CONFIG
point, then execs the service.  A bad setting exits 2 naming the variable.
"""

from __future__ import annotations

import os
import sys

from powertrip.config import ConfigError, RunConfig

CONFIG_OUT = "/tmp/powertrip-run.yaml"
PREFIX = "POWERTRIP_RUN_"


def run_config(env: dict[str, str]) -> RunConfig:
    base = env.get("POWERTRIP_RUN_CONFIG")
    config = RunConfig.from_yaml(base) if base else RunConfig()
    fields = set(RunConfig.field_names())
    unknown = sorted(
        k
        for k in env
        if k.startswith(PREFIX)
        and k != "POWERTRIP_RUN_CONFIG"
        and k[len(PREFIX) :].lower() not in fields
    )
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {', '.join(unknown)}; allowed: "
            + ", ".join(PREFIX + f.upper() for f in sorted(fields))
        )
    overrides = {}
    for name in fields:
        value = env.get(PREFIX + name.upper(), "")
        if value != "":
            overrides[name] = value
    try:
        return config.with_overrides(**overrides).validate()
    except ConfigError as exc:
        raise ConfigError(f"{exc} (from the POWERTRIP_RUN_* environment)") from None


def main(argv: list[str]) -> int:
    if not argv or not argv[0].startswith("services."):
        print("usage: entrypoint.py services.NAME [ARGS...]", file=sys.stderr)
        return 2
    try:
        config = run_config(dict(os.environ))
    except ConfigError as exc:
        print(f"entrypoint: {exc}", file=sys.stderr)
        return 2
    config.write_yaml(CONFIG_OUT)
    os.environ["POWERTRIP_CONFIG"] = CONFIG_OUT
    print(
        f"entrypoint: {argv[0]}: workload={config.workload} policy={config.policy} "
        f"sites={config.num_sites} clock={config.clock} rounds={config.max_rounds}",
        flush=True,
    )
    os.execvp(sys.executable, [sys.executable, "-m", *argv])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
