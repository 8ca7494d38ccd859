"""Container entry point: `python /app/deploy/entrypoint.py services.NAME [ARGS...]`.

Builds the run configuration every service of a deployment shares from the environment
(compose's `.env`): an optional YAML (POWERTRIP_RUN_CONFIG) overridden field by field by
POWERTRIP_RUN_<FIELD> (e.g. POWERTRIP_RUN_WORKLOAD=synthetic, POWERTRIP_RUN_NUM_SITES=4,
POWERTRIP_RUN_CLOCK=wall, POWERTRIP_RUN_POLICY_PARAMS='{k: 20}'), each value read as
`--set` reads one and checked as the YAML file's (RunConfig.with_environment), validates
it, writes it where `--config` / POWERTRIP_CONFIG point, then execs the service.  A bad
setting exits 2 naming the variable (or the file).

Restarts (compose's `restart: on-failure` after a crash or a kill):

* The aggregator is started with `--resume`: a restarted container continues the run in
  `--out` from its last checkpoint.  A run that already finished (`summary.json` exists) is
  not resumed: its directory is kept as `OUT.finished-STAMP` and a new run starts in `OUT`, so
  a fresh `docker compose up` after a finished run starts a new run.
* A site worker runs as a child of this process, under a fixed `--worker-id` (HOSTNAME-1, so
  a restarted container claims its own site again; POWERTRIP_SITE_WORKER_WORKER_ID (old
  name POWERTRIP_WORKER_ID) when set, as a site bundle sets it; Docker Swarm tasks get
  HOSTNAME `site-worker-<slot>` from the stack file, so a replacement task claims its
  slot's site; a Kubernetes Indexed Job's pod i hosts site i as site-worker-i).  When it
  exits because the aggregator went away (0, or 1 for an aggregator RPC error; not after 3
  fast failures in a row), the run is asked for its state (`GetStatus`): while the
  aggregator is back and the run unfinished the worker rejoins; once the run is done or
  failed, or the aggregator stays unreachable for POWERTRIP_REJOIN_TIMEOUT_S (default 600),
  it exits with the worker's code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from powertrip.core.config import ConfigError, RunConfig
from powertrip.core.envnames import getenv
from powertrip.core.profiles import site_id

CONFIG_OUT = "/tmp/powertrip-run.yaml"
PREFIX = "POWERTRIP_RUN_"
#: the site worker's --worker-id and --aggregator (powertrip/core/envnames.py)
WORKER_ID_ENV = "POWERTRIP_SITE_WORKER_WORKER_ID"
SITES_ENV = "POWERTRIP_SITE_WORKER_SITES"
AGGREGATOR_ENV = "POWERTRIP_SITE_WORKER_AGGREGATOR"
#: the run states after which a worker does not rejoin (RunStatus.state)
FINISHED = ("done", "failed")


def run_config(env: dict[str, str]) -> RunConfig:
    """The run configuration: POWERTRIP_RUN_CONFIG's YAML, then each POWERTRIP_RUN_<FIELD>,
    read and checked as `--set` reads one (RunConfig.with_environment); a bad value's
    message names the file or the variable."""
    base = env.get(PREFIX + "CONFIG")
    config = RunConfig.from_yaml(base) if base else RunConfig()
    return config.with_environment(env, PREFIX).validate()


def _flag(argv: list[str], name: str) -> str | None:
    """The value of `--name=V` or `--name V` in argv, else None."""
    for i, arg in enumerate(argv):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def aggregator_args(argv: list[str], now: float | None = None) -> list[str]:
    """`--resume` continues an unfinished run; a finished one is set aside for a new run."""
    out = _flag(argv, "--out")
    if "--resume" not in argv or not out:
        return argv
    out_dir = Path(out)
    if (out_dir / "summary.json").exists():
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
        kept = out_dir.with_name(f"{out_dir.name}.finished-{stamp}")
        out_dir.rename(kept)
        print(f"entrypoint: {out_dir} holds a finished run: kept as {kept}; new run", flush=True)
    elif (out_dir / "checkpoint").exists():
        print(f"entrypoint: resuming the unfinished run in {out_dir}", flush=True)
    return argv


def run_state(address: str, timeout_s: float = 5.0) -> str | None:
    """The aggregator's RunStatus.state, or None when it cannot be reached."""
    import grpc

    from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc

    cert, key, ca = (os.environ.get(f"POWERTRIP_TLS_{n}") for n in ("CERT", "KEY", "CA"))
    if cert and key and ca:
        creds = grpc.ssl_channel_credentials(
            Path(ca).read_bytes(), Path(key).read_bytes(), Path(cert).read_bytes()
        )
        channel = grpc.secure_channel(address, creds)
    else:
        channel = grpc.insecure_channel(address)
    try:
        stub = aggregator_pb2_grpc.AggregatorStub(channel)
        return stub.GetStatus(aggregator_pb2.GetStatusRequest(), timeout=timeout_s).state
    except grpc.RpcError:
        return None
    finally:
        channel.close()


def _worker_id_given(argv: list[str]) -> bool:
    """The worker id is named by its flag or its variable (the worker itself warns about an
    old variable name: not twice)."""
    return _flag(argv, "--worker-id") is not None or bool(getenv(WORKER_ID_ENV, warn=False))


def indexed_job_args(argv: list[str], env: dict[str, str]) -> list[str]:
    """In a Kubernetes Indexed Job (JOB_COMPLETION_INDEX = i), the pod hosts site i under the
    worker id site-worker-i, unless the flags or the environment name them: a restarted or
    rescheduled pod claims its own site again, as a Swarm slot does."""
    index = env.get("JOB_COMPLETION_INDEX", "")
    if not index.isdigit():
        return argv
    if not _worker_id_given(argv):
        argv = [*argv, f"--worker-id=site-worker-{index}"]
    if _flag(argv, "--sites") is None and not getenv(SITES_ENV, warn=False):
        argv = [*argv, f"--sites={site_id(int(index))}"]
    return argv


def supervise_worker(argv: list[str]) -> int:
    """Run the site worker; rejoin while the aggregator's run is unfinished (see above)."""
    argv = indexed_job_args(argv, os.environ)
    if not _worker_id_given(argv):
        argv = [*argv, f"--worker-id={os.environ.get('HOSTNAME') or os.uname().nodename}-1"]
    # the worker's own defaults: the flag, else the environment (a site bundle's env file)
    aggregator = (
        _flag(argv, "--aggregator") or getenv(AGGREGATOR_ENV, warn=False) or "localhost:50051"
    )
    timeout_s = float(os.environ.get("POWERTRIP_REJOIN_TIMEOUT_S", "600"))
    child: subprocess.Popen | None = None

    def forward(signum, _frame) -> None:
        if child is not None and child.poll() is None:
            child.send_signal(signum)
        else:
            sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    quick_failures = 0
    while True:
        started = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", *argv])
        code = child.wait()
        if code not in (0, 1):
            return code
        # a worker that keeps failing fast is broken, not cut off: leave it to the restart
        # policy (which gives up after its retries) instead of rejoining forever
        quick_failures = quick_failures + 1 if code and time.monotonic() - started < 60 else 0
        if quick_failures >= 3:
            return code
        deadline = time.monotonic() + timeout_s
        state = run_state(aggregator)
        while state is None and time.monotonic() < deadline:
            time.sleep(2.0)
            state = run_state(aggregator)
        if state is None or state in FINISHED:
            return code
        print(f"entrypoint: site worker exited {code}; the run is {state}: rejoining", flush=True)


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
    if argv[0] == "services.aggregator":
        argv = aggregator_args(argv)
    elif argv[0] == "services.site_worker" and os.environ.get("POWERTRIP_WORKER_REJOIN") == "1":
        return supervise_worker(argv)
    os.execvp(sys.executable, [sys.executable, "-m", *argv])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
