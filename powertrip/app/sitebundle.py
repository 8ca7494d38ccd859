"""`powertrip site-bundle`: everything one remote site worker needs, in one directory.

Operators of NVFLARE and Flower expect a per-site "startup kit": the site's own certificate
and key signed by the deployment's CA, the CA certificate, the join token, an env file and
the exact `docker run` line.  The directory is copied to the GPU VM as it is and started
with `sh docker-run.sh`; nothing else on the VM needs PowerTrip.

The certificate is made with openssl from the deployment's CA (`ca.crt` and `ca.key` in
--secrets, as deploy/tls/make-certs.sh writes them), with the same extensions as that script
(serverAuth and clientAuth, DNS:NAME, DNS:localhost, IP:127.0.0.1): the worker dials the
profiler and the aggregator with it, and its own health check dials it on 127.0.0.1.  The
CA key never goes into the bundle.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: where the container sees the bundle (the `-v BUNDLE:MOUNT:ro` of docker-run.sh)
MOUNT = "/run/secrets/powertrip"
ENV_FILE = "site.env"
#: the site's own token, in the worker's --site-tokens format (only with a per-site token)
SITE_TOKENS = "site-tokens.yaml"
RUN_SCRIPT = "docker-run.sh"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$")


class BundleError(ValueError):
    """The bundle cannot be made as asked; the message says why and what to pass."""


@dataclass(frozen=True)
class BundleSpec:
    """What goes into one site's bundle (see `powertrip site-bundle --help`)."""

    secrets: Path  # the deployment's ca.crt, ca.key and join-token
    out: Path
    aggregator: str  # host:port the VM dials
    profiler: str  # host:port: the worker claims its site there
    site: str = ""  # "" = the profiler gives a free one
    name: str = ""  # the worker's id, certificate CN and container name (default: site or "site")
    image: str = "powertrip-trainer:cuda"
    gpus: bool = True
    threads: int = 8
    days: int = 825
    extra_env: tuple[tuple[str, str], ...] = ()
    #: the site's own join token (`powertrip provision`): the bundle then holds it in
    #: site-tokens.yaml and the worker presents it; the aggregator's --site-tokens has it too
    site_token: str = ""

    @property
    def worker(self) -> str:
        return self.name or (f"{self.site}-remote" if self.site else "remote-site")


def _check(spec: BundleSpec) -> None:
    if spec.site_token and not spec.site:
        raise BundleError("a per-site token needs the site it belongs to (--site)")
    for what, value in (("--aggregator", spec.aggregator), ("--profiler", spec.profiler)):
        if not ADDRESS.match(value):
            raise BundleError(f"{what} {value!r}: expected host:port as the VM reaches it")
    for what, value in (("--site", spec.site), ("--name", spec.name)):
        if value and not NAME.match(value):
            raise BundleError(f"{what} {value!r}: letters, digits, '.', '_', '-' only")
    for name in ("ca.crt", "ca.key", "join-token"):
        if not (spec.secrets / name).is_file():
            raise BundleError(
                f"{spec.secrets / name} not found: --secrets must hold the deployment's CA and "
                "join token (JOIN_TOKEN=1 deploy/tls/make-certs.sh DIR writes them)"
            )
    if not (spec.secrets / "join-token").read_text().strip():
        raise BundleError(f"{spec.secrets / 'join-token'} is empty")
    if spec.out.exists() and any(spec.out.iterdir()):
        raise BundleError(f"{spec.out} exists and is not empty: give a new directory")
    if shutil.which("openssl") is None:
        raise BundleError("openssl not found: it signs the site's certificate")


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise BundleError(f"openssl {args[0]} failed: {done.stderr.strip()[-500:]}")


def _sign(spec: BundleSpec, cert: Path, key: Path) -> None:
    """A key and a certificate for the worker, signed by the deployment's CA."""
    name = spec.worker
    with tempfile.TemporaryDirectory() as tmp:
        csr, ext = Path(tmp) / "site.csr", Path(tmp) / "ext.cnf"
        ext.write_text(
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
            f"subjectAltName={_alt_names(spec)}\n"
        )
        old = os.umask(0o077)
        try:
            _openssl(
                "req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-subj", f"/CN={name}",
                "-keyout", str(key), "-out", str(csr),
            )  # fmt: skip
        finally:
            os.umask(old)
        # -CAcreateserial writes ca.srl beside the CA: use a serial of our own instead
        serial = "0x" + os.urandom(16).hex()
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(spec.secrets / "ca.crt"),
            "-CAkey", str(spec.secrets / "ca.key"), "-set_serial", serial,
            "-days", str(spec.days), "-sha256", "-extfile", str(ext), "-out", str(cert),
        )  # fmt: skip
    _openssl("verify", "-CAfile", str(spec.secrets / "ca.crt"), str(cert))


def _alt_names(spec: BundleSpec) -> str:
    """The certificate's names: the worker's, its site's (what an aggregator started with
    --site-certs checks a registration against), localhost and 127.0.0.1."""
    names = [spec.worker, *([spec.site] if spec.site and spec.site != spec.worker else [])]
    return ",".join([*(f"DNS:{n}" for n in names), "DNS:localhost", "IP:127.0.0.1"])


def env_lines(spec: BundleSpec) -> list[str]:
    """The worker's settings, as `docker run --env-file` reads them (no quotes, no spaces)."""
    env = {
        "POWERTRIP_SITE_WORKER_AGGREGATOR": spec.aggregator,
        "POWERTRIP_SITE_WORKER_PROFILER": spec.profiler,
        # claim through the profiler, the deployment's one claim book: a free site, or the
        # named one (which must exist in the run)
        "POWERTRIP_SITE_WORKER_CLAIM_SITE": "1",
        "POWERTRIP_SITE_WORKER_SITES": spec.site,
        # a stable id: a restarted container gets its own site back
        "POWERTRIP_SITE_WORKER_WORKER_ID": spec.worker,
        # rejoin when the aggregator restarts and resumes (deploy/entrypoint.py)
        "POWERTRIP_WORKER_REJOIN": "1",
        "POWERTRIP_JOIN_TOKEN_FILE": f"{MOUNT}/join-token",
        "POWERTRIP_TLS_CERT": f"{MOUNT}/tls.crt",
        "POWERTRIP_TLS_KEY": f"{MOUNT}/tls.key",
        "POWERTRIP_TLS_CA": f"{MOUNT}/ca.crt",
        "POWERTRIP_SITE_WORKER_DEVICE": "cuda" if spec.gpus else "auto",
        **({"POWERTRIP_SITE_TOKENS": f"{MOUNT}/{SITE_TOKENS}"} if spec.site_token else {}),
        **dict(spec.extra_env),
    }
    for key, value in env.items():
        if any(c in value for c in "\n\r"):
            raise BundleError(f"{key}: a value cannot hold a line break")
    return [f"{key}={value}" for key, value in env.items()]


#: `docker run --user`: the bundle's owner, who alone may read its key and tokens (mode
#: 0600); the image's own user (uid 65532) could not. Expanded by the shell.
RUN_AS = '"$(id -u):$(id -g)"'


def docker_run(spec: BundleSpec, bundle: str = '"$here"') -> str:
    """The `docker run` line that starts the worker from the bundle directory `bundle`."""
    words = [
        "docker", "run", "-d", "--name", f"powertrip-{spec.worker}",
        "--restart", "on-failure:5", "--user", RUN_AS,
        *(["--gpus", "all"] if spec.gpus else []),
        "--env-file", f"{bundle}/{ENV_FILE}",
        "-v", f"{bundle}:{MOUNT}:ro",
        spec.image, "services.site_worker", "--threads", str(spec.threads),
    ]  # fmt: skip
    return " ".join(w if w.startswith(bundle) or w == RUN_AS else shlex.quote(w) for w in words)


def make_bundle(spec: BundleSpec) -> list[Path]:
    """Write the bundle into `spec.out`; returns the files written."""
    _check(spec)
    out = spec.out
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o700)  # a private key and the join token
    shutil.copyfile(spec.secrets / "ca.crt", out / "ca.crt")
    token = out / "join-token"
    token.write_text((spec.secrets / "join-token").read_text().strip() + "\n")
    token.chmod(0o600)
    if spec.site_token:
        own = out / SITE_TOKENS
        own.write_text(f"{spec.site}: {spec.site_token}\n")
        own.chmod(0o600)
    _sign(spec, out / "tls.crt", out / "tls.key")
    (out / "tls.key").chmod(0o600)
    (out / ENV_FILE).write_text("\n".join(env_lines(spec)) + "\n")
    run = out / RUN_SCRIPT
    run.write_text(
        "#!/bin/sh\n"
        f"# Start the PowerTrip site worker {spec.worker} from this bundle (made by "
        "`powertrip site-bundle`).\n"
        "# Stop it with: docker rm -f " + f"powertrip-{spec.worker}\n"
        "set -e\n"
        'here=$(cd "$(dirname "$0")" && pwd)\n'
        f"{docker_run(spec)}\n"
    )
    run.chmod(0o755)
    (out / "README.txt").write_text(_readme(spec))
    return sorted(p for p in out.iterdir())


def _readme(spec: BundleSpec) -> str:
    site = spec.site or "a free site (the profiler picks the lowest unclaimed one)"
    return f"""PowerTrip site bundle: worker {spec.worker}, {site}

Copy this directory to the GPU machine (it holds a private key and the join token: keep
it 0700) and start the worker there:

    sh {RUN_SCRIPT}

which runs

    {docker_run(spec, bundle="BUNDLE")}

with BUNDLE = this directory.  The worker claims its site from the profiler at
{spec.profiler}, registers with the aggregator at {spec.aggregator} over mutual TLS with
the join token, trains the tasks it is given and rejoins when the aggregator restarts.

Files: ca.crt (the deployment's CA), tls.crt and tls.key (this worker's certificate and
key, signed by that CA), join-token, {ENV_FILE} (the worker's settings), {RUN_SCRIPT}.
The image {spec.image} must be on the machine (docs/deploy.md, "Running a site worker
on a remote GPU VM").  Logs: docker logs -f powertrip-{spec.worker}
"""
