"""`powertrip site-bundle`: a real certificate from the deployment's CA (openssl), the files a
remote worker needs and nothing more, and a docker-run.sh that runs the documented line (run
here against a stand-in `docker` that records its arguments).  The bundle joining a live
stack: tests/e2e/test_swarm_stack.py."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from powertrip.app.cli import main
from powertrip.app.sitebundle import (
    MOUNT,
    RUN_AS,
    BundleError,
    BundleSpec,
    docker_run,
    make_bundle,
)
from powertrip.core.envnames import RENAMED

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")


def _spec(secrets: Path, out: Path, **kw) -> BundleSpec:
    return BundleSpec(
        secrets=secrets,
        out=out,
        aggregator="agg.example.org:50051",
        profiler="agg.example.org:50052",
        **kw,
    )


def _openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


def test_bundle_holds_a_signed_certificate_the_ca_the_token_and_no_ca_key(secrets, tmp_path):
    out = tmp_path / "site-003"
    files = make_bundle(_spec(secrets, out, site="site-003"))
    names = sorted(f.name for f in files)
    assert names == [
        "README.txt", "ca.crt", "docker-run.sh", "join-token", "site.env", "tls.crt", "tls.key",
    ]  # fmt: skip
    assert "ca.key" not in names
    assert _openssl("verify", "-CAfile", str(secrets / "ca.crt"), str(out / "tls.crt"))
    text = _openssl("x509", "-in", str(out / "tls.crt"), "-noout", "-text")
    assert "CN = site-003-remote" in text or "CN=site-003-remote" in text
    assert "DNS:site-003-remote" in text and "IP Address:127.0.0.1" in text
    assert "TLS Web Client Authentication" in text
    # the key matches the certificate
    pub = _openssl("x509", "-in", str(out / "tls.crt"), "-noout", "-pubkey")
    assert pub == _openssl("pkey", "-in", str(out / "tls.key"), "-pubout")
    for private in ("tls.key", "join-token"):
        assert stat.S_IMODE((out / private).stat().st_mode) == 0o600, private
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert (out / "join-token").read_text().strip() == (secrets / "join-token").read_text().strip()
    # make-certs.sh's serial file is not touched by the bundle
    assert sorted(p.name for p in secrets.iterdir()) == sorted(
        ["aggregator.crt", "aggregator.key", "ca.crt", "ca.key", "ca.srl", "join-token"]
    )


def test_env_file_points_the_worker_at_the_bundle(secrets, tmp_path):
    out = tmp_path / "b"
    make_bundle(_spec(secrets, out, site="site-003", gpus=False, extra_env=(("X_Y", "1"),)))
    env = dict(line.split("=", 1) for line in (out / "site.env").read_text().splitlines())
    assert env["POWERTRIP_SITE_WORKER_AGGREGATOR"] == "agg.example.org:50051"
    assert env["POWERTRIP_SITE_WORKER_PROFILER"] == "agg.example.org:50052"
    assert env["POWERTRIP_SITE_WORKER_CLAIM_SITE"] == "1"
    assert env["POWERTRIP_SITE_WORKER_SITES"] == "site-003"
    assert env["POWERTRIP_SITE_WORKER_WORKER_ID"] == "site-003-remote"
    assert env["POWERTRIP_WORKER_REJOIN"] == "1" and env["POWERTRIP_SITE_WORKER_DEVICE"] == "auto"
    assert not set(env) & set(RENAMED)  # no deprecated name
    assert env["X_Y"] == "1"
    for key in ("POWERTRIP_TLS_CERT", "POWERTRIP_TLS_KEY", "POWERTRIP_TLS_CA",
                "POWERTRIP_JOIN_TOKEN_FILE"):  # fmt: skip
        inside = Path(env[key])
        assert inside.parent == Path(MOUNT) and (out / inside.name).is_file(), key


def test_docker_run_sh_runs_the_documented_line(secrets, tmp_path):
    out = tmp_path / "gpu-vm"
    spec = _spec(secrets, out, name="vm-1", image="powertrip-trainer:cuda", threads=4)
    make_bundle(spec)
    fake = tmp_path / "bin"
    fake.mkdir()
    record = tmp_path / "args"
    (fake / "docker").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\n')
    (fake / "docker").chmod(0o755)
    # run from elsewhere: the script finds its own directory
    done = subprocess.run(
        ["sh", str(out / "docker-run.sh")], cwd="/", capture_output=True, text=True,
        env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    args = record.read_text().splitlines()
    line = docker_run(spec, bundle=str(out)).replace(RUN_AS, f"{os.getuid()}:{os.getgid()}")
    expected = shlex.split(line)[1:]
    assert args == expected
    # as the bundle's owner, who alone may read its key (the image's own user may not)
    assert args[args.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"
    assert args[:4] == ["run", "-d", "--name", "powertrip-vm-1"]
    assert ["--gpus", "all"] == args[args.index("--gpus") : args.index("--gpus") + 2]
    assert f"{out}:{MOUNT}:ro" in args and f"{out}/site.env" in args
    assert args[-4:] == ["powertrip-trainer:cuda", "services.site_worker", "--threads", "4"]
    # the README shows the same line
    assert docker_run(spec, bundle="BUNDLE") in (out / "README.txt").read_text()


def test_bad_requests_are_refused_with_the_reason(secrets, tmp_path):
    with pytest.raises(BundleError, match="host:port"):
        make_bundle(BundleSpec(secrets, tmp_path / "a", "agg.example.org", "x:1"))
    with pytest.raises(BundleError, match="letters, digits"):
        make_bundle(_spec(secrets, tmp_path / "a", site="site 3"))
    no_ca = tmp_path / "no-ca"
    no_ca.mkdir()
    (no_ca / "ca.crt").write_text("x")
    with pytest.raises(BundleError, match="ca.key not found"):
        make_bundle(_spec(no_ca, tmp_path / "a"))
    used = tmp_path / "used"
    used.mkdir()
    (used / "something").write_text("x")
    with pytest.raises(BundleError, match="not empty"):
        make_bundle(_spec(secrets, used))


def test_cli_writes_a_bundle_and_exits_2_on_a_bad_one(secrets, tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["site-bundle", "--secrets", str(secrets), "--out", str(out), "--no-gpus",
            "--aggregator", "10.0.0.5:50051", "--profiler", "10.0.0.5:50052"]  # fmt: skip
    assert main(argv) == 0
    assert "POWERTRIP_SITE_WORKER_SITES=\n" in (out / "site.env").read_text()  # a free site
    assert "--gpus" not in (out / "docker-run.sh").read_text()
    assert main(argv) == 2  # the directory is not empty now
    assert "not empty" in capsys.readouterr().err
    bad = ["site-bundle", "--secrets", str(tmp_path / "nothing"), "--out", str(tmp_path / "n"),
           "--aggregator", "a:1", "--profiler", "a:2"]  # fmt: skip
    assert main(bad) == 2
    # and through the installed entry point, as the docs run it
    powertrip = Path(sys.executable).with_name("powertrip")
    if powertrip.exists():
        done = subprocess.run([str(powertrip), "site-bundle", "--help"], capture_output=True,
                              text=True)  # fmt: skip
        assert done.returncode == 0 and "--secrets" in done.stdout


def test_cli_takes_the_sites_own_token_from_the_aggregators_token_file(secrets, tmp_path, capsys):
    """A rotation's new bundle keeps the site's token: --site-tokens reads it from the file
    `powertrip provision` wrote for the aggregator."""
    tokens = tmp_path / "site-tokens.yaml"
    tokens.write_text("site-007: " + "a7" * 24 + "\nsite-008: " + "b8" * 24 + "\n")
    argv = ["site-bundle", "--secrets", str(secrets), "--no-gpus", "--aggregator", "a:1",
            "--profiler", "a:2", "--site-tokens", str(tokens)]  # fmt: skip
    out = tmp_path / "rotated"
    assert main([*argv, "--out", str(out), "--site", "site-007"]) == 0
    assert (out / "site-tokens.yaml").read_text() == "site-007: " + "a7" * 24 + "\n"
    assert main([*argv, "--out", str(tmp_path / "x"), "--site", "site-009"]) == 2
    assert "has no token for --site 'site-009'" in capsys.readouterr().err
