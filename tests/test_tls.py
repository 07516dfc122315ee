"""TLS and mTLS on the gRPC listener, with certificates from ``brain-admin certs dev``.

Every server here is a real brain-server on loopback (port 0) with TLS settings, backed
by the session PostgreSQL; every client is a real gRPC channel.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from brain.clients import BrainClient
from brain.clients.errors import BrainClientError
from brain.server.admin.certs import DevCerts, generate_dev_certs
from brain.server.runtime.app import StartupError, start_server
from brain.server.runtime.startup import check_tls_files
from brain.v1 import identity_pb2, identity_pb2_grpc

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .zygote import run_module

HEALTHCHECK = Path(__file__).resolve().parent.parent / "deploy" / "healthcheck.py"
CALL_TIMEOUT = 10.0


@pytest.fixture(scope="module")
def dev_certs(tmp_path_factory: pytest.TempPathFactory) -> DevCerts:
    return generate_dev_certs(tmp_path_factory.mktemp("dev-certs"), client_name="agent:ci")


@pytest.fixture(scope="module")
def other_certs(tmp_path_factory: pytest.TempPathFactory) -> DevCerts:
    """A second, unrelated dev CA with its own server and client certificates."""
    return generate_dev_certs(tmp_path_factory.mktemp("other-certs"))


def _server(
    pg_cluster: PgCluster, loop_thread: LoopThread, certs: DevCerts, *, mtls: bool
) -> Iterator[BrainServer]:
    from brain.server.telemetry import logs

    logs.configure("warning")
    settings = server_settings(
        pg_cluster,
        tls_cert=certs.server_cert,
        tls_key=certs.server_key,
        tls_client_ca=certs.ca_cert if mtls else None,
    )
    server = BrainServer(cluster=pg_cluster, loop=loop_thread, settings=settings)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def tls_server(
    pg_cluster: PgCluster, loop_thread: LoopThread, dev_certs: DevCerts
) -> Iterator[BrainServer]:
    yield from _server(pg_cluster, loop_thread, dev_certs, mtls=False)


@pytest.fixture(scope="module")
def mtls_server(
    pg_cluster: PgCluster, loop_thread: LoopThread, dev_certs: DevCerts
) -> Iterator[BrainServer]:
    yield from _server(pg_cluster, loop_thread, dev_certs, mtls=True)


def _credentials(
    ca: DevCerts | None = None, client: DevCerts | None = None
) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=ca.ca_cert.read_bytes() if ca else None,
        private_key=client.client_key.read_bytes() if client else None,
        certificate_chain=client.client_cert.read_bytes() if client else None,
    )


def _who_am_i(
    target: str,
    credentials: grpc.ChannelCredentials | None,
    key: str | None,
    options: Sequence[tuple[str, Any]] = (),
) -> identity_pb2.WhoAmIResponse:
    channel = (
        grpc.secure_channel(target, credentials, options)
        if credentials is not None
        else grpc.insecure_channel(target, options)
    )
    metadata = (("authorization", f"Bearer {key}"),) if key else ()
    with channel:
        stub = identity_pb2_grpc.IdentityServiceStub(channel)
        reply: identity_pb2.WhoAmIResponse = stub.WhoAmI(
            identity_pb2.WhoAmIRequest(), metadata=metadata, timeout=CALL_TIMEOUT
        )
        return reply


def _refused(
    target: str,
    credentials: grpc.ChannelCredentials | None,
    key: str | None,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        _who_am_i(target, credentials, key, options)
    code: grpc.StatusCode = info.value.code()
    return code


def _key(server: BrainServer, principal: str = "alice") -> tuple[str, str]:
    tenant = unique("tls")
    return tenant, server.mint_key(tenant, principal, permissions="memories:read")


# -- TLS -----------------------------------------------------------------------------------


def test_tls_client_trusting_dev_ca_calls_whoami(
    tls_server: BrainServer, dev_certs: DevCerts
) -> None:
    """A client that trusts the dev CA reaches WhoAmI over TLS with its API key."""
    tenant, key = _key(tls_server)
    reply = _who_am_i(tls_server.target, _credentials(ca=dev_certs), key)
    assert (reply.tenant_name, reply.principal) == (tenant, "alice")


def test_tls_verifies_the_dns_name_in_the_certificate(
    tls_server: BrainServer, dev_certs: DevCerts
) -> None:
    """The server name is checked: localhost (in the certificate) works, another name fails."""
    _, key = _key(tls_server)
    as_localhost = [("grpc.ssl_target_name_override", "localhost")]
    assert _who_am_i(tls_server.target, _credentials(ca=dev_certs), key, as_localhost).principal
    as_other = [("grpc.ssl_target_name_override", "brain.example.com")]
    code = _refused(tls_server.target, _credentials(ca=dev_certs), key, as_other)
    assert code == grpc.StatusCode.UNAVAILABLE


def test_tls_plaintext_client_fails(tls_server: BrainServer, dev_certs: DevCerts) -> None:
    """A plaintext client cannot talk to a TLS listener, even with a valid key."""
    _, key = _key(tls_server)
    assert _refused(tls_server.target, None, key) == grpc.StatusCode.UNAVAILABLE
    # Positive control: the same key over TLS reaches the same listener.
    assert _who_am_i(tls_server.target, _credentials(ca=dev_certs), key).principal == "alice"


def test_the_clients_say_what_a_tls_mistake_means(
    tls_server: BrainServer, brain_server: BrainServer, dev_certs: DevCerts,
    other_certs: DevCerts,
) -> None:  # fmt: skip
    """gRPC reports TLS mistakes as UNAVAILABLE with its own words; the clients' error adds
    what to do: a plaintext client to TLS, a TLS client to plaintext, an untrusted CA.
    The right CA reaches the server (control)."""
    _, key = _key(tls_server)
    _, plain_key = _key(brain_server)

    def said(target: str, key: str, ca: Path | None) -> str:
        with (
            BrainClient(target, key, root_certificates=ca, timeout=10) as client,
            pytest.raises(BrainClientError) as info,
        ):
            client.whoami()
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        return str(info.value)

    assert "hint: if the server speaks TLS, give this client its CA" in said(
        tls_server.target, key, None
    )
    assert "hint: the server does not speak TLS on this port" in said(
        brain_server.target, plain_key, dev_certs.ca_cert
    )
    assert "hint: the server's certificate is not signed by the CA" in said(
        tls_server.target, key, other_certs.ca_cert
    )
    with BrainClient(tls_server.target, key, root_certificates=dev_certs.ca_cert) as client:
        assert client.whoami().principal == "alice"


def test_tls_client_not_trusting_the_ca_fails(
    tls_server: BrainServer, other_certs: DevCerts, dev_certs: DevCerts
) -> None:
    """A client that trusts another CA (or only the system roots) rejects the server."""
    _, key = _key(tls_server)
    for credentials in (_credentials(ca=other_certs), grpc.ssl_channel_credentials()):
        assert _refused(tls_server.target, credentials, key) == grpc.StatusCode.UNAVAILABLE
    # Positive control: trusting the dev CA, the same call goes through.
    assert _who_am_i(tls_server.target, _credentials(ca=dev_certs), key).principal == "alice"


def test_tls_still_requires_an_api_key(tls_server: BrainServer, dev_certs: DevCerts) -> None:
    """TLS protects the channel; a call without a key is still UNAUTHENTICATED."""
    code = _refused(tls_server.target, _credentials(ca=dev_certs), None)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    _, key = _key(tls_server)  # positive control: with a key, the same call goes through
    assert _who_am_i(tls_server.target, _credentials(ca=dev_certs), key).principal == "alice"


def test_deploy_healthcheck_speaks_tls(tls_server: BrainServer, dev_certs: DevCerts) -> None:
    """deploy/healthcheck.py reports SERVING over TLS and fails without the right CA."""
    env = {
        **os.environ,
        "BRAIN_HEALTH_TARGET": tls_server.target,
        "BRAIN_HEALTH_TLS_CA": str(dev_certs.ca_cert),
    }
    ok = subprocess.run(
        [sys.executable, str(HEALTHCHECK)], env=env, capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0, ok.stderr
    assert "SERVING" in ok.stdout
    env.pop("BRAIN_HEALTH_TLS_CA")
    env["BRAIN_TLS_CERT"] = str(dev_certs.server_cert)  # TLS on, system roots: not trusted
    bad = subprocess.run(
        [sys.executable, str(HEALTHCHECK)], env=env, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 1
    assert "UNAVAILABLE" in bad.stderr


def test_tls_half_configured_refuses_to_start(
    pg_cluster: PgCluster, loop_thread: LoopThread, dev_certs: DevCerts
) -> None:
    """A certificate without its key, or a client CA without TLS, stops startup with a reason."""
    for overrides, message in [
        ({"tls_cert": dev_certs.server_cert}, "both --tls-cert and --tls-key"),
        ({"tls_client_ca": dev_certs.ca_cert}, "--tls-client-ca needs"),
    ]:
        with pytest.raises(StartupError, match=message):
            loop_thread.run(start_server(server_settings(pg_cluster, **overrides)))


def test_tls_files_grpc_would_refuse_are_named_at_start(
    dev_certs: DevCerts, other_certs: DevCerts, tmp_path: Path
) -> None:
    """gRPC refuses a certificate that is not PEM, a key of another certificate, or a key
    given as the certificate by failing to create the port, which brain-server reported as
    an address in use. Each is named by its flag before anything starts; the right pair
    passes (control)."""
    read = Path.read_bytes
    garbage = b"not a certificate\n"
    encrypted = serialization.load_pem_private_key(read(dev_certs.server_key), None)
    locked = encrypted.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    cert, key, ca = read(dev_certs.server_cert), read(dev_certs.server_key), read(dev_certs.ca_cert)
    check_tls_files(cert, key, ca)  # control: the pair brain-admin certs dev wrote
    for files, message in [
        ((cert, read(other_certs.server_key), None), "--tls-key is not the private key of"),
        ((key, key, None), "--tls-cert is not a PEM certificate"),
        ((garbage, key, None), "--tls-cert is not a PEM certificate"),
        ((cert, cert, None), "--tls-key is not a PEM private key"),
        ((cert, locked, None), "--tls-key is encrypted with a password"),
        ((cert, key, garbage), "--tls-client-ca is not a PEM certificate"),
    ]:
        with pytest.raises(StartupError, match=message):
            check_tls_files(*files)


# -- mTLS ----------------------------------------------------------------------------------


def test_mtls_client_without_certificate_is_refused(
    mtls_server: BrainServer, dev_certs: DevCerts
) -> None:
    """With --tls-client-ca, a client that trusts the server but has no certificate is cut off."""
    _, key = _key(mtls_server)
    code = _refused(mtls_server.target, _credentials(ca=dev_certs), key)
    assert code == grpc.StatusCode.UNAVAILABLE
    with_cert = _credentials(ca=dev_certs, client=dev_certs)  # positive control
    assert _who_am_i(mtls_server.target, with_cert, key).principal == "alice"


def test_mtls_client_with_certificate_calls_whoami(
    mtls_server: BrainServer, dev_certs: DevCerts
) -> None:
    """The client certificate from the dev CA plus a key reaches WhoAmI."""
    tenant, key = _key(mtls_server, "agent:ci")
    reply = _who_am_i(mtls_server.target, _credentials(ca=dev_certs, client=dev_certs), key)
    assert (reply.tenant_name, reply.principal) == (tenant, "agent:ci")


def test_mtls_client_certificate_from_another_ca_is_refused(
    mtls_server: BrainServer, dev_certs: DevCerts, other_certs: DevCerts
) -> None:
    """A client certificate signed by an unrelated CA is refused at the handshake."""
    _, key = _key(mtls_server)
    credentials = _credentials(ca=dev_certs, client=other_certs)
    assert _refused(mtls_server.target, credentials, key) == grpc.StatusCode.UNAVAILABLE
    with_cert = _credentials(ca=dev_certs, client=dev_certs)  # positive control
    assert _who_am_i(mtls_server.target, with_cert, key).principal == "alice"


def test_mtls_certificate_does_not_replace_the_api_key(
    mtls_server: BrainServer, dev_certs: DevCerts
) -> None:
    """A valid client certificate without an API key is still UNAUTHENTICATED."""
    credentials = _credentials(ca=dev_certs, client=dev_certs)
    assert _refused(mtls_server.target, credentials, None) == grpc.StatusCode.UNAUTHENTICATED
    _, key = _key(mtls_server)  # positive control: the same certificate with a key
    assert _who_am_i(mtls_server.target, credentials, key).principal == "alice"


# -- brain-admin certs dev -----------------------------------------------------------------


def _admin(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BRAIN_DATA_DIR": str(data_dir)}
    env.pop("BRAIN_DATABASE_URL", None)
    env.pop("BRAIN_ADMIN_DATABASE_URL", None)
    return run_module("brain.server.admin.main", *args, env=env, timeout=60)


def test_certs_dev_command_writes_usable_files(tmp_path: Path) -> None:
    """`brain-admin certs dev` writes the CA and certs, keys 0600, and starts no database."""
    out, data_dir = tmp_path / "certs", tmp_path / "data"
    data_dir.mkdir()
    done = _admin(
        "certs",
        "dev",
        "--out",
        str(out),
        "--hosts",
        "localhost,127.0.0.1,::1,brain.internal",
        "--days",
        "7",
        "--client-name",
        "agent:coder",
        data_dir=data_dir,
    )
    assert done.returncode == 0, done.stderr
    assert list(data_dir.iterdir()) == []  # no embedded PostgreSQL, no pepper
    for name in ("ca-key.pem", "server-key.pem", "client-key.pem"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600, name
    assert f"--tls-cert {out / 'server.pem'} --tls-key {out / 'server-key.pem'}" in done.stdout
    assert f"--tls-client-ca {out / 'ca.pem'}" in done.stdout

    ca = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    server = x509.load_pem_x509_certificate((out / "server.pem").read_bytes())
    client = x509.load_pem_x509_certificate((out / "client.pem").read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for leaf in (server, client):
        leaf.verify_directly_issued_by(ca)
        assert (leaf.not_valid_after_utc - leaf.not_valid_before_utc).days == 7
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost", "brain.internal"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    server_eku = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    client_eku = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(server_eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert list(client_eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    cn = client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert cn == "agent:coder"


def test_certs_dev_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    """A second run keeps the existing CA unless --force is given."""
    out = tmp_path / "certs"
    assert _admin("certs", "dev", "--out", str(out), data_dir=tmp_path).returncode == 0
    before = (out / "ca.pem").read_bytes()
    again = _admin("certs", "dev", "--out", str(out), data_dir=tmp_path)
    assert again.returncode == 2
    assert "--force" in again.stderr
    assert (out / "ca.pem").read_bytes() == before
    forced = _admin("certs", "dev", "--out", str(out), "--force", data_dir=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert (out / "ca.pem").read_bytes() != before


def test_brain_ingest_presents_a_client_certificate_from_its_flags(
    mtls_server: BrainServer, dev_certs: DevCerts, tmp_path: Path
) -> None:
    """`brain` takes --tls-cert and --tls-key (it read BRAIN_TLS_CERT and BRAIN_TLS_KEY
    only): with them it ingests through mTLS; without them the error's hint names the
    client certificate, not only the CA it was already given."""
    key = mtls_server.mint_key(unique("tlsi"), "dev", permissions="knowledge:read,knowledge:write",
                               namespaces=("proj",))  # fmt: skip
    (tmp_path / "a.md").write_text("# A\n\nalpha\n")
    env = {**os.environ, "BRAIN_TARGET": mtls_server.target, "BRAIN_API_KEY": key}
    for name in ("BRAIN_TLS_CERT", "BRAIN_TLS_KEY", "BRAIN_TLS_CA"):
        env.pop(name, None)
    command = [sys.executable, "-m", "brain.clients.ingest", "--tls-ca", str(dev_certs.ca_cert)]

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *extra, "ingest", ".", "--collection", "c"], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    refused = run()
    assert refused.returncode != 0 and "client certificates (mTLS)" in refused.stderr
    done = run("--tls-cert", str(dev_certs.client_cert), "--tls-key", str(dev_certs.client_key))
    assert done.returncode == 0 and "1 created" in done.stderr, done.stderr


def test_the_server_process_logs_json_lines_only_through_a_refused_handshake(
    tmp_path: Path, pg_cluster: PgCluster, dev_certs: DevCerts
) -> None:
    """A brain-server process with mTLS, GRPC_VERBOSITY unset, refuses a client without a
    certificate and serves one with: its stderr is the server's JSON lines only. gRPC's C
    core wrote its handshake note there in plain text ('I1208 ... ssl_transport_security')."""
    if not pg_cluster.app_dsn:
        pytest.skip("needs a database URL for the server process")
    from .test_server_process import SERVER, free_port, wait_serving

    env = {
        **os.environ, "BRAIN_DATABASE_URL": pg_cluster.app_dsn,
        "BRAIN_PEPPER_FILE": str(pg_cluster.pepper_file), "BRAIN_DATA_DIR": str(tmp_path),
        "BRAIN_EMBEDDER": "none", "BRAIN_WORKERS": "1", "BRAIN_LOG_FORMAT": "json",
    }  # fmt: skip
    env.pop("GRPC_VERBOSITY", None)  # this process set it on importing brain.server
    target = f"localhost:{free_port()}"
    tls = ("--tls-cert", str(dev_certs.server_cert), "--tls-key", str(dev_certs.server_key),
           "--tls-client-ca", str(dev_certs.ca_cert))  # fmt: skip
    log = tmp_path / "server.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen([*SERVER, "--listen", target, *tls], env=env, stderr=stderr)
    try:  # positive control: a client with a certificate gets SERVING
        wait_serving(target, proc, credentials=_credentials(ca=dev_certs, client=dev_certs))
        no_cert = grpc.secure_channel(target, _credentials(ca=dev_certs))
        with no_cert, pytest.raises(grpc.RpcError) as refused:
            health_pb2_grpc.HealthStub(no_cert).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = log.read_text().splitlines()
    assert any('"server stopped"' in line for line in lines), lines
    for line in lines:
        assert isinstance(json.loads(line), dict), line
