"""Secure by default (issue #16, item 4): where the join token comes from, what a bad token
file does, and when the aggregator refuses an exposed address without token and TLS.

The rules are checked as functions (powertrip/rpc/auth.py) and in the real
`python -m services.aggregator` / `python -m services.site_worker` processes, which refuse
before they load any data (a few seconds each). Serving with the allowed combinations is
tests/integration/test_secure_serving.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from powertrip.rpc.auth import (
    INSECURE_ENV,
    JOIN_TOKEN_ENV,
    JOIN_TOKEN_FILE_ENV,
    AuthConfigError,
    exposure_problem,
    insecure_allowed,
    is_loopback,
    read_token_file,
    resolve_join_token,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def token_files(tmp_path) -> dict[str, str]:
    paths = {}
    for name, text in (("a", "file-token-a\n"), ("b", "  file-token-b  \n"), ("empty", " \n")):
        (tmp_path / name).write_text(text)
        paths[name] = str(tmp_path / name)
    return paths


# ---- precedence: --join-token > --join-token-file > POWERTRIP_JOIN_TOKEN_FILE > env -------
def test_token_precedence_flag_then_file_then_environment(token_files):
    env = {JOIN_TOKEN_ENV: "env-token", JOIN_TOKEN_FILE_ENV: token_files["b"]}
    assert resolve_join_token("flag-token", token_files["a"], env).value == "flag-token"
    assert resolve_join_token(None, token_files["a"], env).value == "file-token-a"
    assert resolve_join_token(None, None, env).value == "file-token-b"  # stripped
    assert resolve_join_token(None, None, {JOIN_TOKEN_ENV: "env-token"}).value == "env-token"
    assert resolve_join_token(None, None, {}).value == ""
    # empty flags and variables count as not given
    assert resolve_join_token("", None, {JOIN_TOKEN_ENV: "env-token"}).value == "env-token"
    assert resolve_join_token(None, None, {JOIN_TOKEN_ENV: "", JOIN_TOKEN_FILE_ENV: ""}).value == ""


def test_token_source_names_where_it_came_from_not_the_token(token_files):
    got = resolve_join_token(None, None, {JOIN_TOKEN_FILE_ENV: token_files["a"]})
    assert got.source == f"{JOIN_TOKEN_FILE_ENV}={token_files['a']}"
    assert "file-token-a" not in got.source
    assert resolve_join_token("x", None, {}).source == "--join-token"
    assert resolve_join_token(None, None, {}).source == "none"


@pytest.mark.parametrize("case", ["missing", "empty", "directory", "binary"])
def test_a_bad_token_file_is_an_error_naming_the_path(tmp_path, token_files, case):
    path = {
        "missing": str(tmp_path / "nope"),
        "empty": token_files["empty"],
        "directory": str(tmp_path),
        "binary": str(tmp_path / "bin"),
    }[case]
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00token")
    with pytest.raises(AuthConfigError, match="join token file") as info:
        read_token_file(path)
    assert path in str(info.value)
    # a named file is never skipped for a weaker source, even with the variable set
    with pytest.raises(AuthConfigError):
        resolve_join_token(None, None, {JOIN_TOKEN_FILE_ENV: path, JOIN_TOKEN_ENV: "env"})


# ---- the exposure rule -------------------------------------------------------------------
@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"]
)
def test_loopback_addresses(host):
    assert is_loopback(host)
    assert (
        exposure_problem("aggregator", host, has_token=False, has_tls=False, insecure=False) is None
    )


@pytest.mark.parametrize("host", ["[::]", "0.0.0.0", "::", "10.0.0.5", "aggregator", ""])
def test_exposed_addresses_need_token_and_tls_or_insecure(host):
    assert not is_loopback(host)
    problem = exposure_problem("aggregator", host, has_token=False, has_tls=False, insecure=False)
    assert problem and "without a join token and without TLS" in problem
    assert "--insecure" in problem and "--join-token-file" in problem and "--tls-cert" in problem
    only_tls = exposure_problem("aggregator", host, has_token=True, has_tls=False, insecure=False)
    assert only_tls and "without TLS" in only_tls and "join token and" not in only_tls
    only_token = exposure_problem("aggregator", host, has_token=False, has_tls=True, insecure=False)
    assert only_token and "without a join token:" in only_token
    assert (
        exposure_problem("aggregator", host, has_token=True, has_tls=True, insecure=False) is None
    )
    assert (
        exposure_problem("aggregator", host, has_token=False, has_tls=False, insecure=True) is None
    )


def test_insecure_from_the_flag_or_the_environment():
    assert insecure_allowed(True, {})
    assert not insecure_allowed(None, {})
    for value in ("1", "true", "YES", "on"):
        assert insecure_allowed(None, {INSECURE_ENV: value}), value
    for value in ("0", "false", "no", "off", ""):
        assert not insecure_allowed(None, {INSECURE_ENV: value}), value
    with pytest.raises(AuthConfigError, match=INSECURE_ENV):
        insecure_allowed(None, {INSECURE_ENV: "maybe"})  # a security switch is not guessed


# ---- the real processes ------------------------------------------------------------------
def _service(name: str, *args: str, env: dict[str, str] | None = None):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("POWERTRIP_")}
    return subprocess.run(
        [sys.executable, "-m", f"services.{name}", *args],
        cwd=REPO,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_aggregator_refuses_an_exposed_bind_without_token_and_tls(tmp_path):
    done = _service("aggregator", "--port", "0", "--host", "0.0.0.0", "--out", str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "refusing to serve on 0.0.0.0" in done.stderr
    assert "without a join token and without TLS" in done.stderr
    assert "--insecure" in done.stderr and "--host 127.0.0.1" in done.stderr
    assert "listening on port" not in done.stdout
    assert not any(tmp_path.iterdir())  # nothing written: refused before the run started


def test_aggregator_default_bind_is_exposed_so_a_token_alone_is_not_enough(tmp_path):
    # the default --host is [::]; a token without TLS still leaves the stream readable
    done = _service(
        "aggregator", "--port", "0", "--out", str(tmp_path), env={JOIN_TOKEN_ENV: "t" * 32}
    )
    assert done.returncode == 2, done.stderr
    assert "refusing to serve on [::]" in done.stderr and "without TLS" in done.stderr
    assert "join token and" not in done.stderr


def test_aggregator_token_file_errors_exit_2_naming_the_path(tmp_path):
    empty = tmp_path / "empty-token"
    empty.write_text("\n")
    for args, env, path in (
        (["--join-token-file", str(tmp_path / "missing")], {}, tmp_path / "missing"),
        ([], {JOIN_TOKEN_FILE_ENV: str(empty), INSECURE_ENV: "1"}, empty),
    ):
        done = _service("aggregator", "--port", "0", "--out", str(tmp_path / "run"), *args, env=env)
        assert done.returncode == 2, done.stderr
        assert f"join token file {path}" in done.stderr, done.stderr
        assert "listening on port" not in done.stdout


def test_site_worker_token_file_errors_exit_2_naming_the_path(tmp_path):
    missing = tmp_path / "missing"
    done = _service(
        "site_worker", "--port", "0", "--host", "127.0.0.1", "--aggregator", "127.0.0.1:1",
        env={JOIN_TOKEN_FILE_ENV: str(missing)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"site_worker: join token file {missing}: cannot read it" in done.stderr
