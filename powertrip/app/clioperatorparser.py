"""The parsers of `powertrip`'s operator commands: looking at runs (logs, ls, status, audit),
a workload's data, a deployment's sites and their credentials (site-bundle, provision,
revoke), shell completion and serving one service. cli.py dispatches them to
clioperators.py and the modules it names."""

from __future__ import annotations

import argparse

from powertrip.app.cliflags import FORMATS, WORKLOADS
from powertrip.rpc.tls import add_tls_flags

SERVICES = ("aggregator", "site_worker", "profiler", "policy")


def add_operator_commands(sub: argparse._SubParsersAction) -> None:
    """logs, audit, ls, status, data, site-bundle, provision, revoke, completion and serve,
    in the order `powertrip --help` lists them."""
    logs = sub.add_parser(
        "logs",
        help="a run's service logs; -f follows them until the run ends",
        description="Print the logs of a run directory's services (RUN/logs/*.log), each line "
        "prefixed with its process. -f follows new lines until the run's summary appears or "
        "Ctrl-C.",
    )
    logs.add_argument("run", help="the run directory")
    logs.add_argument("-f", "--follow", action="store_true", help="follow new lines")
    logs.add_argument(
        "--service", default="", help="only this process's log (aggregator, policy, ...)"
    )
    logs.add_argument("--tail", type=int, default=20, help="last lines of each log (default 20)")

    audit = sub.add_parser(
        "audit",
        help="recompute a run's model from its audited deltas and check it",
        description="Same as `python -m services.aggregator.audit AUDIT_DIR RUN_DIR`: the "
        "aggregator kept every accepted delta with --audit-dir; this recomputes each round's "
        "FedAvg from them and checks the model the run ended with.",
    )
    audit.add_argument("args", nargs=argparse.REMAINDER, help="the audit's own arguments")

    listing = sub.add_parser(
        "ls",
        help="the runs under a directory: state, policy, rounds, time to target",
        description="List every run directory under DIR (one with a rounds.csv or a "
        "summary.json) with its state (done, failed, or in progress or stopped when it has no "
        "summary yet), policy, workload, clock, rounds, final accuracy, time to target and why "
        "it stopped.",
    )
    listing.add_argument("dir", nargs="?", default="runs", help="where to look (default runs/)")
    listing.add_argument("--format", choices=FORMATS, default="table", help="table or json")

    status = sub.add_parser(
        "status",
        help="a deployed aggregator's run: state, round, k, sites alive, accuracy",
        description="Ask a running aggregator (its GetStatus RPC) where its run stands. Exit "
        "0 with the status, 1 when the aggregator cannot be reached or refuses.",
    )
    status.add_argument("address", help="the aggregator's host:port")
    status.add_argument("--format", choices=FORMATS, default="table", help="table or json")
    status.add_argument(
        "--timeout-s", type=float, default=5.0, help="how long to wait for the answer"
    )
    add_tls_flags(status)

    data = sub.add_parser("data", help="inspect or prepare a workload's data")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    info = data_sub.add_parser("info", help="samples per site and class coverage for N sites")
    info.add_argument("workload", help=f"one of {WORKLOADS}")
    info.add_argument("--sites", type=int, default=100, help="number of sites (default 100)")
    info.add_argument("--seed", type=int, default=0, help="partition seed (default 0)")
    info.add_argument("--data-dir", help="the workload's data (default: the repo's data/)")
    prepare = data_sub.add_parser(
        "prepare", help="build a workload's cached data (e.g. shakespeare)"
    )
    prepare.add_argument("workload", help=f"one of {WORKLOADS}")
    prepare.add_argument("--cache-dir", help="where to write the prepared data")
    pretrain = data_sub.add_parser(
        "pretrain",
        help="pretrain shakespeare-lm's base on the plays no site holds (seeded, CPU minutes)",
    )
    pretrain.add_argument("workload", choices=["shakespeare-lm"])
    pretrain.add_argument("--steps", type=int, default=3000, help="AdamW steps (default 3000)")
    pretrain.add_argument("--batch-size", type=int, default=64)
    pretrain.add_argument("--lr", type=float, default=3e-3)
    pretrain.add_argument("--seed", type=int, default=0)
    pretrain.add_argument(
        "--out", help="the base's file (default: data/shakespeare-lm/base.safetensors)"
    )

    bundle = sub.add_parser(
        "site-bundle",
        help="a remote site's bundle: its certificate and key, the CA, the join token, an env "
        "file and the docker run line",
        description="Write one remote site worker's bundle into --out: a certificate and key "
        "signed by the deployment's CA (openssl), ca.crt, join-token, site.env and "
        "docker-run.sh. Copy the directory to the GPU machine and run `sh docker-run.sh`.",
    )
    bundle.add_argument(
        "--secrets",
        required=True,
        help="the deployment's ca.crt, ca.key and join-token (deploy/secrets: "
        "JOIN_TOKEN=1 deploy/tls/make-certs.sh writes them); ca.key stays there",
    )
    bundle.add_argument("--out", required=True, help="a new directory for the bundle")
    bundle.add_argument(
        "--aggregator", required=True, help="host:port of the aggregator, as the VM reaches it"
    )
    bundle.add_argument(
        "--profiler",
        required=True,
        help="host:port of the profiler, as the VM reaches it (the worker claims its site there)",
    )
    bundle.add_argument(
        "--site", default="", help="the site to host (must exist in the run; default: a free one)"
    )
    bundle.add_argument(
        "--name",
        default="",
        help="worker id, certificate name and container name (default SITE-remote)",
    )
    bundle.add_argument(
        "--site-tokens",
        default="",
        metavar="FILE",
        help="the aggregator's site-tokens.yaml (from `powertrip provision`): the bundle "
        "carries --site's own token, e.g. to rotate that site's certificate",
    )
    bundle.add_argument(
        "--image", default="powertrip-trainer:cuda", help="the trainer image on the VM"
    )
    bundle.add_argument(
        "--gpus",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--gpus all and POWERTRIP_SITE_WORKER_DEVICE=cuda (--no-gpus: CPU, device auto)",
    )
    bundle.add_argument("--threads", type=int, default=8, help="torch threads on the VM")
    bundle.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="another setting for site.env, e.g. POWERTRIP_LOG_FORMAT=json (repeatable)",
    )

    provision = sub.add_parser(
        "provision",
        help="every site's bundle at once, each with its own certificate and join token",
        description="Read a sites file (deployment, aggregator, profiler, sites: see "
        "powertrip/app/provision.py) and write OUT/<site>/ bundles, each with a certificate "
        "naming its site and its own join token, and OUT/aggregator/site-tokens.yaml for the "
        "aggregator's --site-tokens (with --site-certs it also checks the certificates).",
    )
    provision.add_argument("sites_file", help="the sites file (YAML)")
    provision.add_argument(
        "--secrets",
        required=True,
        help="the deployment's ca.crt, ca.key and join-token (JOIN_TOKEN=1 "
        "deploy/tls/make-certs.sh DIR writes them)",
    )
    provision.add_argument("--out", required=True, help="a new directory for the bundles")

    revoke = sub.add_parser(
        "revoke",
        help="add a site or a certificate to the aggregator's revocation list (--revoked)",
        description="Append to the revocation list (made if missing) that the aggregator's "
        "--revoked names; it reloads the file within a second, and refuses every call of a "
        "revoked site or certificate with PERMISSION_DENIED (powertrip_auth_failures_total"
        '{kind="revoked"}). Rotating a site\'s certificate: make it a new bundle '
        "(`powertrip site-bundle --site S --site-tokens FILE`), start it, then revoke the old "
        'certificate with --cert (docs/deploy.md, "Revoking and rotating").',
    )
    revoke.add_argument("revocation_list", help="the aggregator's --revoked file (YAML)")
    revoke.add_argument(
        "--site", action="append", default=[], help="revoke every certificate of this site"
    )
    revoke.add_argument(
        "--cert",
        action="append",
        default=[],
        metavar="FILE",
        help="revoke this one certificate (PEM), e.g. the one a rotation replaced",
    )

    completion = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script for the shell, generated from this CLI's "
        "own parser (shtab), e.g. `powertrip completion bash > "
        "~/.local/share/bash-completion/completions/powertrip`.",
    )
    completion.add_argument("shell", choices=("bash", "zsh", "tcsh"))

    serve = sub.add_parser("serve", help="run one service (same as python -m services.NAME)")
    serve.add_argument("service", choices=SERVICES)
    serve.add_argument("args", nargs=argparse.REMAINDER, help="the service's own flags")
