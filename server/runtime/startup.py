"""What brain-server checks and opens before it serves, kept out of `app` so that the
parent of several workers (`workers`) starts without importing the servicers, the domain
and the embedders, which only its workers need: the parent starts PostgreSQL sooner, and
so does a restart."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
import structlog
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from brain.server.runtime.config import Settings
from brain.server.telemetry import metrics

_log = structlog.get_logger("brain.server")


class StartupError(Exception):
    """The server cannot start; the message is one line for the operator."""


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    if settings.tls_cert is None and settings.tls_key is None:
        if settings.tls_client_ca is not None:
            raise StartupError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if settings.tls_cert is None or settings.tls_key is None:
        raise StartupError("TLS needs both --tls-cert and --tls-key")
    try:
        cert = settings.tls_cert.read_bytes()
        key = settings.tls_key.read_bytes()
        ca = settings.tls_client_ca.read_bytes() if settings.tls_client_ca else None
    except OSError as exc:
        raise StartupError(f"cannot read TLS file: {exc}") from exc
    check_tls_files(cert, key, ca)
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


def check_tls_files(cert: bytes, key: bytes, ca: bytes | None) -> None:
    """A `StartupError` naming the flag whose file gRPC would refuse: gRPC says only that it
    could not create the port, which reads as an address in use. An expired certificate
    is logged (a certificate being rotated must not stop a restart)."""
    try:
        chain = x509.load_pem_x509_certificates(cert)
    except ValueError:
        raise StartupError(
            "--tls-cert is not a PEM certificate (it should hold -----BEGIN CERTIFICATE-----)"
        ) from None
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except TypeError:  # encrypted: gRPC takes no password
        raise StartupError(
            "--tls-key is encrypted with a password; brain-server needs the key unencrypted "
            "(readable by its user only)"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise StartupError(
            "--tls-key is not a PEM private key (it should hold -----BEGIN ... PRIVATE KEY-----)"
        ) from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if chain[0].public_key().public_bytes(*spki) != private.public_key().public_bytes(*spki):
        raise StartupError(
            "--tls-key is not the private key of --tls-cert's certificate (the first one in "
            "the file); pass the key the certificate was issued for"
        )
    if ca is not None:
        try:
            x509.load_pem_x509_certificates(ca)
        except ValueError:
            raise StartupError("--tls-client-ca is not a PEM certificate (a CA bundle)") from None
    now = datetime.now(UTC)
    if not chain[0].not_valid_before_utc <= now <= chain[0].not_valid_after_utc:
        _log.warning(
            "the TLS certificate is not valid now: clients will refuse it",
            not_before=chain[0].not_valid_before_utc.isoformat(),
            not_after=chain[0].not_valid_after_utc.isoformat(),
        )


def serve_metrics(
    settings: Settings, grpc_port: int, workers_dir: str | None = None
) -> metrics.MetricsServer | None:
    """Start the /metrics endpoint if asked for; never on the gRPC port. ``workers_dir``:
    the parent of several workers serves what they write there."""
    listen = settings.metrics_listen
    if settings.metrics_in_parent:
        metrics.count_for_parent()
    if not listen:
        return None
    try:
        _, port = metrics.host_port(listen)
    except ValueError as exc:
        raise StartupError(f"--metrics-listen: {exc}") from exc
    if port == grpc_port:
        raise StartupError(
            f"--metrics-listen {listen} is the gRPC port; metrics need an address of their own"
        )
    try:
        return metrics.serve(listen, workers_dir)
    except OSError as exc:
        raise StartupError(f"cannot serve metrics on {listen}: {exc}") from exc
