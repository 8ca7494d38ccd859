"""Optional mutual TLS for every service and client.

One certificate per component serves both ends: a service presents it to its callers and
uses it as its client certificate when it dials out (the aggregator to the profiler and
policy, a site worker to the aggregator). With a CA given, servers *require* a client
certificate signed by it, so a caller without one is refused during the handshake.
`deploy/tls/make-certs.sh` makes a CA and such certificates with openssl.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

import grpc


class TlsError(ValueError):
    """A TLS flag is incomplete or names an unreadable file; the message names the flag."""


@dataclass(frozen=True)
class TlsFiles:
    cert: bytes
    key: bytes
    ca: bytes

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.ca, require_client_auth=True
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )


def add_tls_flags(parser: argparse.ArgumentParser) -> None:
    for name, what in (
        ("cert", "this component's certificate (PEM)"),
        ("key", "its private key (PEM)"),
        ("ca", "the CA that signs every component's certificate (PEM)"),
    ):
        env = f"POWERTRIP_TLS_{name.upper()}"
        parser.add_argument(
            f"--tls-{name}",
            default=os.environ.get(env),
            help=f"mutual TLS: {what} (env {env}); all three or none",
        )


def load_tls(args: argparse.Namespace) -> TlsFiles | None:
    """TlsFiles from --tls-cert/--tls-key/--tls-ca, None when none is given."""
    given = {n: getattr(args, f"tls_{n}", None) for n in ("cert", "key", "ca")}
    if not any(given.values()):
        return None
    missing = [f"--tls-{n}" for n, v in given.items() if not v]
    if missing:
        raise TlsError(f"mutual TLS needs --tls-cert, --tls-key and --tls-ca; missing {missing}")
    data = {}
    for name, path in given.items():
        try:
            data[name] = Path(path).read_bytes()
        except OSError as exc:
            raise TlsError(f"--tls-{name} {path}: {exc.strerror or exc}") from None
        if b"-----BEGIN" not in data[name]:
            raise TlsError(f"--tls-{name} {path}: not a PEM file")
    return TlsFiles(**data)
