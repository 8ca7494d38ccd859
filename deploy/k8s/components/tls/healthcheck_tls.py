"""Probe over mutual TLS: `python healthcheck_tls.py PORT` exits 0 when SERVING.

The kubelet's native gRPC probe speaks plaintext only, so with TLS on the probes run this
in the container instead, with the pod's own certificate (POWERTRIP_TLS_CERT/KEY/CA; the
certificates from deploy/tls/make-certs.sh name IP:127.0.0.1).
"""

import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def read(name: str) -> bytes:
    with open(os.environ[f"POWERTRIP_TLS_{name}"], "rb") as f:
        return f.read()


creds = grpc.ssl_channel_credentials(read("CA"), read("KEY"), read("CERT"))
try:
    with grpc.secure_channel(f"127.0.0.1:{sys.argv[1]}", creds) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=3)
except grpc.RpcError as exc:
    print(f"{exc.code().name}: {exc.details()}", file=sys.stderr)
    sys.exit(1)
sys.exit(0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1)
