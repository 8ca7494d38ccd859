"""Policy-service configuration: one dataclass, from defaults < YAML < environment < flags.

The YAML may be a policy-service file (the keys below) or the shared run configuration
that `POWERTRIP_CONFIG` points every service at; from a run configuration the policy takes
only `estimator` and ignores the rest. Any other key is an error that names it, so a typo
never silently falls back to a default.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from powertrip.core.config import RunConfig
from powertrip.core.policies.base import ESTIMATORS
from powertrip.rpc.service import LOG_FORMAT_ENV, LOG_FORMATS, add_log_format_flag
from powertrip.rpc.tls import add_tls_flags

ENV_PREFIX = "POWERTRIP_POLICY_"
DEFAULT_PORT = 50053


class PolicyConfigError(ValueError):
    """A configuration value is wrong; the message names the key and what is allowed."""


@dataclass(frozen=True)
class PolicyConfig:
    port: int = DEFAULT_PORT
    host: str = "[::]"
    metrics_port: int = 0  # 0 = no metrics endpoint
    log_level: str = "INFO"
    log_format: str = "text"  # "text" or "json" (one JSON object per line)
    grace_s: float = 5.0  # drain time on SIGTERM
    #: round-time estimator when a request names none ("paper" | "clock")
    estimator: str = "paper"
    #: use measured latency/bandwidth when a profile carries them (wall-clock deployments);
    #: a request can override it with the parameter `use_measured` (0 or 1)
    use_measured: bool = True

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def validate(self) -> PolicyConfig:
        if not 0 <= self.port <= 65535:
            raise PolicyConfigError(f"port must be in 0..65535, got {self.port}")
        if not 0 <= self.metrics_port <= 65535:
            raise PolicyConfigError(f"metrics_port must be in 0..65535, got {self.metrics_port}")
        if self.estimator not in ESTIMATORS:
            raise PolicyConfigError(
                f"estimator {self.estimator!r} is not one of {', '.join(ESTIMATORS)}"
            )
        if self.log_format not in LOG_FORMATS:
            raise PolicyConfigError(
                f"log_format {self.log_format!r} is not one of {', '.join(LOG_FORMATS)}"
            )
        if self.grace_s < 0:
            raise PolicyConfigError(f"grace_s must be >= 0, got {self.grace_s:g}")
        return self

    # ---- loading -----------------------------------------------------------------------
    @classmethod
    def settings_from_mapping(cls, data: Any, source: str = "config") -> dict[str, Any]:
        """The settings a YAML mapping makes (typed), ignoring other run-config keys."""
        if data is None:
            return {}
        if not isinstance(data, Mapping):
            raise PolicyConfigError(
                f"{source}: expected a mapping of settings, got {type(data).__name__}"
            )
        own = set(cls.keys())
        run_keys = set(RunConfig.field_names())
        unknown = sorted(str(k) for k in data if k not in own and k not in run_keys)
        if unknown:
            raise PolicyConfigError(
                f"{source}: unknown key(s) {', '.join(unknown)}; allowed: "
                f"{', '.join(cls.keys())} (or the keys of a run configuration)"
            )
        return {k: _coerce(k, v, source) for k, v in data.items() if k in own}

    @classmethod
    def settings_from_yaml(cls, path: str | Path) -> dict[str, Any]:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise PolicyConfigError(f"cannot read config {path}: {exc}") from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise PolicyConfigError(f"{path}: not valid YAML: {exc}") from exc
        return cls.settings_from_mapping(data, str(path))

    @classmethod
    def settings_from_env(cls, env: Mapping[str, str]) -> dict[str, Any]:
        """POWERTRIP_POLICY_<KEY> for each key (POWERTRIP_LOG_LEVEL and POWERTRIP_LOG_FORMAT
        are shared by services)."""
        out: dict[str, Any] = {}
        if "POWERTRIP_LOG_LEVEL" in env:
            out["log_level"] = env["POWERTRIP_LOG_LEVEL"]
        if LOG_FORMAT_ENV in env:
            out["log_format"] = env[LOG_FORMAT_ENV].strip().lower()
        for key in cls.keys():
            name = ENV_PREFIX + key.upper()
            if name in env:
                out[key] = _coerce(key, env[name], name)
        return out

    @classmethod
    def resolve(
        cls, args: argparse.Namespace, env: Mapping[str, str] | None = None
    ) -> PolicyConfig:
        """defaults < YAML (`--config` or POWERTRIP_CONFIG) < environment < flags."""
        env = os.environ if env is None else env
        settings: dict[str, Any] = {}
        config_path = args.config or env.get("POWERTRIP_CONFIG")
        if config_path:
            settings.update(cls.settings_from_yaml(config_path))
        settings.update(cls.settings_from_env(env))
        for key in cls.keys():
            value = getattr(args, key, None)
            if value is not None:
                settings[key] = value
        return dataclasses.replace(cls(), **settings).validate()


_TYPES = {f.name: f.type for f in fields(PolicyConfig)}


def _coerce(key: str, value: Any, source: str) -> Any:
    kind = _TYPES[key]
    try:
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise TypeError
            return int(value)
        if kind == "float":
            if isinstance(value, bool):
                raise TypeError
            return float(value)
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("true", "yes", "1", "on"):
                return True
            if text in ("false", "no", "0", "off"):
                return False
            raise TypeError
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise TypeError
        return str(value)
    except (TypeError, ValueError):
        raise PolicyConfigError(f"{source}: {key} must be a {kind}, got {value!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """Flags default to None so that 'not given' lets YAML and environment through."""
    parser = argparse.ArgumentParser(
        prog="python -m services.policy",
        description="PowerTrip policy service: which sites train next round, and how many.",
    )
    parser.add_argument(
        "--port",
        type=int,
        help=f"gRPC port (env {ENV_PREFIX}PORT; default {DEFAULT_PORT}; 0 = any free port)",
    )
    parser.add_argument("--host", help=f"bind address (env {ENV_PREFIX}HOST; default [::])")
    parser.add_argument(
        "--metrics-port",
        dest="metrics_port",
        type=int,
        help=f"Prometheus metrics port (env {ENV_PREFIX}METRICS_PORT; default 0 = off)",
    )
    parser.add_argument(
        "--config",
        help="YAML: policy-service settings or a run configuration (env POWERTRIP_CONFIG)",
    )
    parser.add_argument(
        "--log-level", dest="log_level", help="DEBUG, INFO, ... (env POWERTRIP_LOG_LEVEL)"
    )
    add_log_format_flag(parser, default=None)
    parser.add_argument(
        "--grace-s", dest="grace_s", type=float, help="drain time on SIGTERM (default 5)"
    )
    parser.add_argument(
        "--estimator",
        choices=ESTIMATORS,
        help="round-time estimator when a request names none (default paper)",
    )
    parser.add_argument(
        "--ignore-measured",
        dest="use_measured",
        action="store_const",
        const=False,
        help="use configured links even when measured ones are present",
    )
    parser.add_argument(
        "--list-policies", action="store_true", help="print one line per policy and exit"
    )
    add_tls_flags(parser)
    return parser
