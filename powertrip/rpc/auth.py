"""Who may join a run: where the join token comes from, and when the aggregator may serve
without one.

Join token sources, first found wins (flag > file > environment):

1. `--join-token TOKEN` on the command line;
2. `--join-token-file PATH`, else `POWERTRIP_JOIN_TOKEN_FILE=PATH`: the form Docker and
   Kubernetes secrets take (a file whose content is the token; surrounding whitespace and
   the trailing newline are stripped);
3. `POWERTRIP_JOIN_TOKEN=TOKEN`.

A flag beats a file and a file beats a bare variable because each is the more deliberate
choice: a flag is typed for this one start, and a secret file is mounted on purpose while a
variable may be inherited from a shell or an old `.env`. A file that is named but cannot be
read, or holds only whitespace, is an error naming the path (exit 2), never an empty token
that would let anyone join.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

JOIN_TOKEN_ENV = "POWERTRIP_JOIN_TOKEN"
JOIN_TOKEN_FILE_ENV = "POWERTRIP_JOIN_TOKEN_FILE"
INSECURE_ENV = "POWERTRIP_INSECURE"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


class AuthConfigError(ValueError):
    """A join-token or --insecure setting that cannot be used; the message names it."""


@dataclass(frozen=True)
class JoinToken:
    value: str  # "" = no token
    source: str  # where it came from, for the log (never the token itself)


def add_join_token_flags(parser: argparse.ArgumentParser, purpose: str) -> None:
    """--join-token and --join-token-file; `purpose` ends their help ("workers must
    present to register", "to present to the aggregator")."""
    parser.add_argument(
        "--join-token",
        default=None,
        help=f"join token {purpose}; visible in the process list, so prefer "
        f"--join-token-file (precedence: --join-token > --join-token-file > "
        f"{JOIN_TOKEN_FILE_ENV} > {JOIN_TOKEN_ENV})",
    )
    parser.add_argument(
        "--join-token-file",
        default=None,
        help=f"read the join token from this file, e.g. a Docker or Kubernetes secret "
        f"(env {JOIN_TOKEN_FILE_ENV})",
    )


def read_token_file(path: str) -> str:
    """The token in `path`, stripped; AuthConfigError naming the path when it is unreadable
    or empty."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AuthConfigError(
            f"join token file {path}: cannot read it: {exc.strerror or exc}"
        ) from None
    except UnicodeDecodeError:
        raise AuthConfigError(f"join token file {path}: not UTF-8 text") from None
    token = text.strip()
    if not token:
        raise AuthConfigError(f"join token file {path}: empty (it must hold the token)")
    return token


def resolve_join_token(
    flag: str | None, file_flag: str | None, env: Mapping[str, str] | None = None
) -> JoinToken:
    """The join token by the precedence in the module docstring; an empty flag or variable
    counts as not given, an empty file as an error."""
    env = os.environ if env is None else env
    if flag:
        return JoinToken(flag, "--join-token")
    if file_flag:
        return JoinToken(read_token_file(file_flag), f"--join-token-file {file_flag}")
    env_file = env.get(JOIN_TOKEN_FILE_ENV, "")
    if env_file:
        return JoinToken(read_token_file(env_file), f"{JOIN_TOKEN_FILE_ENV}={env_file}")
    if env.get(JOIN_TOKEN_ENV, ""):
        return JoinToken(env[JOIN_TOKEN_ENV], JOIN_TOKEN_ENV)
    return JoinToken("", "none")


def add_insecure_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="serve on a non-loopback address without a join token and TLS anyway (a "
        f"local emulation; env {INSECURE_ENV}=1)",
    )


def insecure_allowed(flag: bool | None, env: Mapping[str, str] | None = None) -> bool:
    """--insecure, else POWERTRIP_INSECURE (1/true/yes/on or 0/false/no/off/empty; anything
    else is an AuthConfigError rather than a guess about a security switch)."""
    if flag:
        return True
    env = os.environ if env is None else env
    value = env.get(INSECURE_ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise AuthConfigError(
        f"{INSECURE_ENV}={env[INSECURE_ENV]!r}: use 1 (serve exposed without a join token "
        "and TLS) or 0"
    )


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost: addresses no other machine can reach."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # a host name other than localhost, "", or a wildcard
        return False


def exposure_problem(
    service: str, host: str, *, has_token: bool, has_tls: bool, insecure: bool
) -> str | None:
    """Why `service` must not serve on `host` as configured, or None when it may.

    The rule is applied to the aggregator only. It is the one service whose port is
    published for callers from other machines (remote site workers), and the only one with
    a join token to check: a worker that reaches it unauthenticated can join the run, read
    the model and push updates into FedAvg. The profiler and policy are called only by the
    aggregator (and the workers' link set-up) on a private network, have no token to
    require, and get mutual TLS from the same flags when the deployment turns it on; a site
    worker dials out and serves nothing but health. Loopback binds are always allowed, so
    the embedded `powertrip run` (every service on 127.0.0.1) needs no flag.
    """
    if is_loopback(host) or (has_token and has_tls) or insecure:
        return None
    missing = [what for what, have in (("a join token", has_token), ("TLS", has_tls)) if not have]
    return (
        f"{service}: refusing to serve on {host} (not a loopback address) without "
        f"{' and without '.join(missing)}: any host that reaches the port could join the run. "
        "Fix: give a join token (--join-token-file FILE or "
        f"{JOIN_TOKEN_FILE_ENV}) and mutual TLS (--tls-cert, --tls-key, --tls-ca), or bind "
        f"to loopback (--host 127.0.0.1), or accept the risk with --insecure "
        f"({INSECURE_ENV}=1), e.g. for a local emulation on a private network."
    )
