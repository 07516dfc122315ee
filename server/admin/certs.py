"""brain-admin certs: local certificates for trying TLS and mTLS.

``brain-admin certs dev --out DIR`` writes a throwaway certificate authority, a server
certificate for the given host names and addresses, and a client certificate for mTLS.
It is for tests and trials on one machine: it needs no network and no database, and
its CA is no substitute for a real one (see ``deploy/TLS.md``).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from brain.server.admin.registry import Context, UsageError, command

DEFAULT_HOSTS = ("localhost", "127.0.0.1")
DEFAULT_DAYS = 30
DEFAULT_CLIENT_NAME = "dev-client"
MAX_DAYS = 825  # what browsers and most TLS stacks still accept for a leaf certificate
_CLOCK_SKEW = timedelta(minutes=5)
_DNS_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")

# File names inside --out; private keys are written with mode 0600.
CA_CERT, CA_KEY = "ca.pem", "ca-key.pem"
SERVER_CERT, SERVER_KEY = "server.pem", "server-key.pem"
CLIENT_CERT, CLIENT_KEY = "client.pem", "client-key.pem"
ALL_FILES = (CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY, CLIENT_CERT, CLIENT_KEY)


class CertError(ValueError):
    """Bad input for certificate generation; the message is one line for the operator."""


@dataclass(frozen=True)
class DevCerts:
    """Where ``generate_dev_certs`` wrote each file."""

    out: Path
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    hosts: tuple[str, ...]
    client_name: str
    not_after: datetime


def parse_hosts(text: str) -> tuple[str, ...]:
    """``localhost,127.0.0.1,::1`` -> validated, de-duplicated host names and addresses."""
    hosts: list[str] = []
    for raw in text.split(","):
        host = raw.strip()
        if not host:
            continue
        if _ip(host) is None and not _is_dns_name(host):
            raise CertError(f"--hosts: {host!r} is neither an IP address nor a DNS name")
        if host not in hosts:
            hosts.append(host)
    if not hosts:
        raise CertError("--hosts needs at least one host name or IP address")
    return tuple(hosts)


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _is_dns_name(host: str) -> bool:
    name = host[2:] if host.startswith("*.") else host  # one leading wildcard label is allowed
    name = name.removesuffix(".")
    return 0 < len(name) <= 253 and all(_DNS_LABEL.match(label) for label in name.split("."))


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str, unit: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Shared Brain (dev)"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _leaf(
    *,
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    not_before: datetime,
    not_after: datetime,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName],
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _ca(
    key: ec.EllipticCurvePrivateKey, not_before: datetime, not_after: datetime
) -> x509.Certificate:
    # A random suffix keeps two dev CAs apart in trust stores and error messages.
    name = _name(f"Shared Brain dev CA {secrets.token_hex(4)}", "dev CA")
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write atomically with ``mode`` from the start, so a key is never readable by others."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)  # the umask may have taken bits away from a 0644 certificate
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def generate_dev_certs(
    out: Path,
    *,
    hosts: tuple[str, ...] = DEFAULT_HOSTS,
    days: int = DEFAULT_DAYS,
    client_name: str = DEFAULT_CLIENT_NAME,
    force: bool = False,
) -> DevCerts:
    """Write a dev CA, a server certificate for ``hosts`` and a client certificate to ``out``."""
    if not 1 <= days <= MAX_DAYS:
        raise CertError(f"--days must be between 1 and {MAX_DAYS}, not {days}")
    client_name = client_name.strip()
    if not client_name or len(client_name) > 64:
        raise CertError("--client-name must be 1 to 64 characters")
    if not hosts:
        raise CertError("--hosts needs at least one host name or IP address")
    if out.exists() and not out.is_dir():
        raise CertError(f"--out {out} exists and is not a directory")
    existing = [name for name in ALL_FILES if (out / name).exists()]
    if existing and not force:
        raise CertError(
            f"{out} already holds {', '.join(existing)}; pass --force to replace them "
            "(clients that trust the old CA will stop trusting the server)"
        )
    out.mkdir(parents=True, exist_ok=True)

    now = datetime.now(UTC)
    not_before, not_after = now - _CLOCK_SKEW, now + timedelta(days=days)
    ca_key, server_key, client_key = _new_key(), _new_key(), _new_key()
    ca_cert = _ca(ca_key, not_before, not_after)

    sans: list[x509.GeneralName] = []
    for host in hosts:
        ip = _ip(host)
        sans.append(x509.IPAddress(ip) if ip is not None else x509.DNSName(host))
    server_cert = _leaf(
        subject=_name(hosts[0], "server"),
        key=server_key,
        ca_cert=ca_cert,
        ca_key=ca_key,
        not_before=not_before,
        not_after=not_after,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=sans,
    )
    client_cert = _leaf(
        subject=_name(client_name, "client"),
        key=client_key,
        ca_cert=ca_cert,
        ca_key=ca_key,
        not_before=not_before,
        not_after=not_after,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        sans=[],
    )

    result = DevCerts(
        out=out,
        ca_cert=out / CA_CERT,
        ca_key=out / CA_KEY,
        server_cert=out / SERVER_CERT,
        server_key=out / SERVER_KEY,
        client_cert=out / CLIENT_CERT,
        client_key=out / CLIENT_KEY,
        hosts=hosts,
        client_name=client_name,
        not_after=not_after,
    )
    # Keys first: a crash midway leaves no certificate without its key.
    _write(result.ca_key, _key_pem(ca_key), 0o600)
    _write(result.server_key, _key_pem(server_key), 0o600)
    _write(result.client_key, _key_pem(client_key), 0o600)
    _write(result.ca_cert, _cert_pem(ca_cert), 0o644)
    _write(result.server_cert, _cert_pem(server_cert), 0o644)
    _write(result.client_cert, _cert_pem(client_cert), 0o644)
    return result


def usage_text(certs: DevCerts) -> dict[str, Any]:
    """The flags and settings that use ``certs``, for humans and ``--json``."""
    host = certs.hosts[0]
    target = f"[{host}]:50051" if ":" in host else f"{host}:50051"
    ca, scert, skey = certs.ca_cert, certs.server_cert, certs.server_key
    ccert, ckey = certs.client_cert, certs.client_key
    return {
        "target": target,
        "server_tls": f"brain-server --tls-cert {scert} --tls-key {skey}",
        "server_mtls": (f"brain-server --tls-cert {scert} --tls-key {skey} --tls-client-ca {ca}"),
        "python_client": (
            f'BrainClient("{target}", key, root_certificates="{ca}", '
            f'certificate_chain="{ccert}", private_key="{ckey}")'
        ),
        "brain_mcp_env": (
            f"BRAIN_TARGET={target} BRAIN_TLS_CA={ca} BRAIN_TLS_CERT={ccert} BRAIN_TLS_KEY={ckey}"
        ),
        "grpcurl": (
            f"grpcurl -cacert {ca} -cert {ccert} -key {ckey} {target} grpc.health.v1.Health/Check"
        ),
    }


def _report(certs: DevCerts) -> str:
    use = usage_text(certs)
    lines = [f"wrote to {certs.out}:"]
    for path, what in [
        (certs.ca_cert, "dev CA certificate: clients trust this"),
        (certs.ca_key, "dev CA private key (0600): keep it, or delete it after use"),
        (certs.server_cert, f"server certificate for {', '.join(certs.hosts)}"),
        (certs.server_key, "server private key (0600)"),
        (certs.client_cert, f"client certificate, CN={certs.client_name}, for mTLS"),
        (certs.client_key, "client private key (0600)"),
    ]:
        lines.append(f"  {path.name:<15} {what}")
    lines += [
        f"valid until {certs.not_after:%Y-%m-%d %H:%M} UTC.",
        "",
        "TLS server:",
        f"  {use['server_tls']}",
        "mTLS server (only clients with a certificate from this CA get in):",
        f"  {use['server_mtls']}",
        "Python client (leave out certificate_chain/private_key without mTLS):",
        f"  {use['python_client']}",
        "brain-mcp (leave out BRAIN_TLS_CERT/BRAIN_TLS_KEY without mTLS):",
        f"  {use['brain_mcp_env']}",
        "grpcurl:",
        f"  {use['grpcurl']}",
        "",
        f"Connect to a name in the certificate ({', '.join(certs.hosts)}); add names with "
        "--hosts. For anything beyond one machine, use real certificates (deploy/TLS.md).",
    ]
    return "\n".join(lines)


async def cmd_certs_dev(ctx: Context) -> None:
    """Write dev certificates; never touches the database (no ``ctx.connect()``)."""
    args = ctx.args
    try:
        certs = generate_dev_certs(
            args.out.absolute(),
            hosts=parse_hosts(args.hosts),
            days=args.days,
            client_name=args.client_name,
            force=args.force,
        )
    except CertError as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"cannot write certificates to {args.out}: {exc}") from exc
    if args.json:
        files = {name: str(certs.out / name) for name in ALL_FILES}
        data = {
            "files": files,
            "hosts": list(certs.hosts),
            "client_name": certs.client_name,
            "not_after": certs.not_after.isoformat(),
            "usage": usage_text(certs),
        }
        print(json.dumps(data, indent=2))
    else:
        print(_report(certs))


def register(subparsers: Any) -> None:
    """Add the ``certs`` subcommands to brain-admin."""
    certs = subparsers.add_parser("certs", help="certificates for TLS and mTLS").add_subparsers(
        dest="sub", required=True
    )
    p: argparse.ArgumentParser = command(
        certs,
        "dev",
        cmd_certs_dev,
        "write a local dev CA, a server and a client certificate (no database needed)",
    )
    p.add_argument("--out", type=Path, required=True, help="folder to write the PEM files to")
    p.add_argument(
        "--hosts",
        default=",".join(DEFAULT_HOSTS),
        help="comma-separated DNS names and IP addresses the server certificate is valid for "
        f"(default {','.join(DEFAULT_HOSTS)})",
    )
    p.add_argument(
        "--days", type=int, default=DEFAULT_DAYS, help=f"validity (default {DEFAULT_DAYS})"
    )
    p.add_argument(
        "--client-name",
        default=DEFAULT_CLIENT_NAME,
        help=f"CN of the client certificate: a principal name (default {DEFAULT_CLIENT_NAME})",
    )
    p.add_argument("--force", action="store_true", help="replace certificates already in --out")
