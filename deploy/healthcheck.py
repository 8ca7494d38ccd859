"""Container health check: `python /app/deploy/healthcheck.py [host:]port [service]`.

Exits 0 only when the gRPC health service at the address answers SERVING, so compose's
`depends_on: condition: service_healthy` waits for a server that really accepts calls.

With mutual TLS on (POWERTRIP_TLS_CERT, POWERTRIP_TLS_KEY and POWERTRIP_TLS_CA set, as
deploy/docker-compose.tls.yml sets them for every service) it dials over TLS with the
container's own certificate: a TLS server refuses plaintext, so a plaintext check would
mark every container unhealthy. The certificates of deploy/tls/make-certs.sh name
IP:127.0.0.1; for others, POWERTRIP_TLS_SERVER_NAME gives the name to verify instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

TLS_ENV = ("POWERTRIP_TLS_CERT", "POWERTRIP_TLS_KEY", "POWERTRIP_TLS_CA")


def open_channel(target: str, env: dict[str, str]) -> grpc.Channel:
    """Plaintext without TLS settings, mutual TLS with all three; ValueError for some."""
    paths = [env.get(name, "") for name in TLS_ENV]
    if not any(paths):
        return grpc.insecure_channel(target)
    if not all(paths):
        missing = [name for name, path in zip(TLS_ENV, paths, strict=True) if not path]
        raise ValueError(f"mutual TLS needs {', '.join(TLS_ENV)}; missing {', '.join(missing)}")
    cert, key, ca = (Path(path).read_bytes() for path in paths)
    credentials = grpc.ssl_channel_credentials(ca, key, cert)
    name = env.get("POWERTRIP_TLS_SERVER_NAME", "")
    options = [("grpc.ssl_target_name_override", name)] if name else []
    return grpc.secure_channel(target, credentials, options=options)


def main(argv: list[str], env: dict[str, str] | None = None) -> int:
    if not argv:
        print("usage: healthcheck.py [host:]port [service]", file=sys.stderr)
        return 2
    env = dict(os.environ) if env is None else env
    target = argv[0] if ":" in argv[0] else f"127.0.0.1:{argv[0]}"
    service = argv[1] if len(argv) > 1 else ""
    try:
        channel = open_channel(target, env)
    except (OSError, ValueError) as exc:
        print(f"{target}: {exc}", file=sys.stderr)
        return 1
    try:
        with channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=3
            )
    except grpc.RpcError as exc:
        print(f"{target}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{target}: {status}")
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
