"""What `powertrip`'s operator commands do with their arguments: site-bundle, provision and
revoke manage a deployment's sites and credentials, ls and status look at runs. Each turns
its module's error (sitebundle.py, provision.py, operate.py, rpc/) into one line on stderr
and an exit code (cliexit.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from powertrip.app.cliexit import EXIT_RUN_FAILED, EXIT_USAGE
from powertrip.core.config import ConfigError


def site_bundle_command(args: argparse.Namespace) -> int:
    """`powertrip site-bundle`: write one remote site's bundle, list what it holds."""
    from powertrip.app.sitebundle import RUN_SCRIPT, BundleError, BundleSpec, make_bundle

    extra = []
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("POWERTRIP_"):
            print(f"powertrip: --env {item!r}: expected POWERTRIP_NAME=VALUE", file=sys.stderr)
            return EXIT_USAGE
        extra.append((name, value))
    site_token = ""
    if args.site_tokens:
        from powertrip.rpc.sitetokens import load_site_tokens

        try:
            tokens = load_site_tokens(args.site_tokens)
        except ConfigError as exc:
            print(f"powertrip: site-bundle: --site-tokens: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if args.site not in tokens:
            print(
                f"powertrip: site-bundle: --site-tokens {args.site_tokens} has no token for "
                f"--site {args.site!r}",
                file=sys.stderr,
            )
            return EXIT_USAGE
        site_token = tokens[args.site]
    spec = BundleSpec(
        secrets=Path(args.secrets),
        out=Path(args.out),
        aggregator=args.aggregator,
        profiler=args.profiler,
        site=args.site,
        name=args.name,
        image=args.image,
        gpus=args.gpus,
        threads=args.threads,
        extra_env=tuple(extra),
        site_token=site_token,
    )
    try:
        files = make_bundle(spec)
    except BundleError as exc:
        print(f"powertrip: site-bundle: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"bundle for worker {spec.worker} in {spec.out}: {', '.join(f.name for f in files)}")
    print(f"on the site's machine: sh {spec.out.name}/{RUN_SCRIPT}")
    return 0


def provision_command(args: argparse.Namespace) -> int:
    """`powertrip provision`: every site's bundle and the aggregator's token file."""
    from powertrip.app.provision import TOKENS_FILE, ProvisionError, load_plan, provision

    try:
        plan = load_plan(Path(args.sites_file))
        bundles = provision(plan, Path(args.secrets), Path(args.out))
    except ProvisionError as exc:
        print(f"powertrip provision: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out)
    print(f"{plan.deployment}: {len(bundles)} site bundle(s) in {out}: {', '.join(bundles)}")
    print(
        f"aggregator: --site-tokens {out / 'aggregator' / TOKENS_FILE} --site-certs "
        "(each site's token and certificate are its own; copy each bundle privately)"
    )
    return 0


def revoke_command(args: argparse.Namespace) -> int:
    """`powertrip revoke`: append sites and certificates to the revocation list."""
    from powertrip.rpc.certificates import add_revocation, certificate_file_facts

    if not args.site and not args.cert:
        print("powertrip revoke: name a --site or a --cert to revoke", file=sys.stderr)
        return EXIT_USAGE
    try:
        certs = [certificate_file_facts(path) for path in args.cert]
        revoked = add_revocation(args.revocation_list, args.site, [c.fingerprint for c in certs])
    except ConfigError as exc:
        print(f"powertrip revoke: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for site in args.site:
        print(f"revoked site {site} (every certificate that names it)")
    for path, cert in zip(args.cert, certs, strict=True):
        names = ", ".join(sorted(cert.names))
        print(f"revoked certificate {path} (sha256 {cert.fingerprint}, names {names})")
    print(
        f"{args.revocation_list}: {len(revoked.sites)} site(s), {len(revoked.certificates)} "
        "certificate(s); an aggregator started with --revoked on this file refuses them "
        "within a second"
    )
    return 0


def operate_command(args: argparse.Namespace) -> int:
    """`ls` and `status`: 0 with the answer; 2 for a directory that is not there; 1 when
    the aggregator cannot be reached or refuses."""
    from powertrip.app import operate
    from powertrip.rpc.tls import TlsError, load_tls

    try:
        if args.command == "ls":
            print(operate.ls_output(Path(args.dir), args.format))
            return 0
        try:
            tls = load_tls(args)
        except TlsError as exc:
            print(f"powertrip status: {exc}", file=sys.stderr)
            return EXIT_USAGE
        credentials = tls.channel_credentials() if tls else None
        status = operate.status_of(args.address, credentials, args.timeout_s)
    except operate.OperateError as exc:
        print(f"powertrip {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE if args.command == "ls" else EXIT_RUN_FAILED
    print(operate.dumps(status) if args.format == "json" else operate.status_lines(status))
    return 0
