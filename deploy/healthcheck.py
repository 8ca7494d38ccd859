"""Container health check: `python /app/deploy/healthcheck.py [host:]port [service]`.

Exits 0 only when the gRPC health service at the address answers SERVING, so compose's
`depends_on: condition: service_healthy` waits for a server that really accepts calls.
"""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: healthcheck.py [host:]port [service]", file=sys.stderr)
        return 2
    target = argv[0] if ":" in argv[0] else f"127.0.0.1:{argv[0]}"
    service = argv[1] if len(argv) > 1 else ""
    try:
        with grpc.insecure_channel(target) as channel:
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
