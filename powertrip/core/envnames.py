"""Environment variable names: one scheme, and the old names kept as deprecated aliases.

The scheme (docs/deploy.md, "Environment variables"):

* `POWERTRIP_RUN_<FIELD>`: one run-configuration setting (a `RunConfig` field, upper-cased),
  read by the container entry point through the same coercion as the YAML file's and `--set`;
  `POWERTRIP_RUN_CONFIG` is the YAML they override.
* `POWERTRIP_<SERVICE>_<OPTION>`: one service's own option, SERVICE one of AGGREGATOR,
  POLICY, PROFILER, SITE_WORKER and OPTION its long flag upper-cased with `-` as `_`
  (`--probe-interval-s` of the profiler: `POWERTRIP_PROFILER_PROBE_INTERVAL_S`).
* `POWERTRIP_<NAME>`, unprefixed: only what several processes share (POWERTRIP_CONFIG,
  POWERTRIP_LOG_LEVEL, POWERTRIP_LOG_FORMAT, POWERTRIP_TLS_*, POWERTRIP_JOIN_TOKEN[_FILE],
  POWERTRIP_INSECURE, POWERTRIP_SITE_TOKENS, POWERTRIP_DATA_DIR, POWERTRIP_CACHE_DIR, ...).

A name that predates the scheme still works: `getenv(NEW)` falls back to the old name and
prints one warning per process that names the new one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

#: old name -> the name of the scheme; the old one is read when the new one is not set
RENAMED: dict[str, str] = {
    # the profiler's options
    "POWERTRIP_LINK_LATENCY_SCALE": "POWERTRIP_PROFILER_LINK_LATENCY_SCALE",
    "POWERTRIP_LINK_BANDWIDTH_SCALE": "POWERTRIP_PROFILER_LINK_BANDWIDTH_SCALE",
    "POWERTRIP_PROBE_INTERVAL_S": "POWERTRIP_PROFILER_PROBE_INTERVAL_S",
    # the site worker's options
    "POWERTRIP_AGGREGATOR": "POWERTRIP_SITE_WORKER_AGGREGATOR",
    "POWERTRIP_PROFILER": "POWERTRIP_SITE_WORKER_PROFILER",
    "POWERTRIP_SITE_IDS": "POWERTRIP_SITE_WORKER_SITES",
    "POWERTRIP_WORKER_ID": "POWERTRIP_SITE_WORKER_WORKER_ID",
    "POWERTRIP_DEVICE": "POWERTRIP_SITE_WORKER_DEVICE",
    "POWERTRIP_SHAPE_LINK": "POWERTRIP_SITE_WORKER_SHAPE_LINK",
    "POWERTRIP_CLAIM_SITE": "POWERTRIP_SITE_WORKER_CLAIM_SITE",
    "POWERTRIP_LINK_IFACE": "POWERTRIP_SITE_WORKER_LINK_IFACE",
    "POWERTRIP_REPORT_POWER": "POWERTRIP_SITE_WORKER_REPORT_POWER",
}
OLD_NAME: dict[str, str] = {new: old for old, new in RENAMED.items()}
_warned: set[str] = set()


def deprecation(old: str) -> str:
    """The warning for an old name."""
    return f"warning: environment variable {old} is deprecated; use {RENAMED[old]}"


def getenv(
    name: str,
    default: str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    warn: bool = True,
) -> str | None:
    """The value of `name`, else of the old name it replaces (with one warning per process
    on stderr that names `name`), else `default`."""
    env = os.environ if env is None else env
    if name in env:
        return env[name]
    old = OLD_NAME.get(name)
    if old is not None and old in env:
        if warn and old not in _warned:
            _warned.add(old)
            print(deprecation(old), file=sys.stderr, flush=True)
        return env[old]
    return default


def flag_on(name: str, env: Mapping[str, str] | None = None) -> bool:
    """A switch variable: set and not empty, 0 or false."""
    return (getenv(name, "", env) or "") not in ("", "0", "false")
