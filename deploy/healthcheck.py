"""Exit 0 when brain-server answers SERVING on grpc.health.v1.Health, else 1.

Used by the Docker HEALTHCHECK and the Kubernetes exec probes, where a plain gRPC probe
cannot speak TLS. It sends no API key (the health service needs none) and reads:

    BRAIN_HEALTH_TARGET    host:port to check (default 127.0.0.1:<port of BRAIN_LISTEN>)
    BRAIN_HEALTH_SERVICE   service name to check (default "": the whole server)
    BRAIN_HEALTH_TIMEOUT   seconds (default 3)
    BRAIN_HEALTH_LIVENESS  set (1) for a liveness probe: any answer, NOT_SERVING included,
                           means alive (NOT_SERVING also means "the database is
                           unreachable", which a restart of brain-server does not fix)
    BRAIN_HEALTH_TLS_CA    PEM file of the CA to trust; TLS is on when this or
                           BRAIN_TLS_CERT (the server's own TLS setting) is set;
                           unset with TLS on: the system roots
    BRAIN_HEALTH_TLS_NAME  name to verify in the server certificate when the target is
                           not in it (e.g. brain.example.com while checking 127.0.0.1)
    BRAIN_HEALTH_TLS_CERT, BRAIN_HEALTH_TLS_KEY
                           client certificate and key when the server requires mTLS
"""

from __future__ import annotations

import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name, "") or default


def _read(path: str) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as fh:
        return fh.read()


def _default_target() -> str:
    listen = _env("BRAIN_LISTEN", "127.0.0.1:50051")
    port = listen.rsplit(":", 1)[-1] if ":" in listen else "50051"
    return f"127.0.0.1:{port}"


def _channel(target: str) -> grpc.Channel:
    ca = _env("BRAIN_HEALTH_TLS_CA")
    if not (ca or _env("BRAIN_TLS_CERT")):
        return grpc.insecure_channel(target)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(ca),
        private_key=_read(_env("BRAIN_HEALTH_TLS_KEY")),
        certificate_chain=_read(_env("BRAIN_HEALTH_TLS_CERT")),
    )
    name = _env("BRAIN_HEALTH_TLS_NAME")
    options = [("grpc.ssl_target_name_override", name)] if name else []
    return grpc.secure_channel(target, credentials, options)


def main(argv: list[str]) -> int:
    target = argv[1] if len(argv) > 1 else _env("BRAIN_HEALTH_TARGET", _default_target())
    service = _env("BRAIN_HEALTH_SERVICE")
    timeout = float(_env("BRAIN_HEALTH_TIMEOUT", "3"))
    try:
        with _channel(target) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
    except grpc.RpcError as exc:
        print(f"unhealthy: {target}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"unhealthy: cannot read a TLS file: {exc}", file=sys.stderr)
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    if reply.status != health_pb2.HealthCheckResponse.SERVING and not _env("BRAIN_HEALTH_LIVENESS"):
        print(f"unhealthy: {target}: {status}", file=sys.stderr)
        return 1
    print(f"healthy: {target}: {status}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
