"""brain-server as an operator runs it: embedded default, SIGTERM, one-line startup errors."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

from brain.v1 import common_pb2, memory_pb2, memory_pb2_grpc

from .conftest import PgCluster

SERVER = [sys.executable, "-m", "brain.server.runtime.main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_serving(
    target: str,
    proc: subprocess.Popen[str],
    seconds: float = 60,
    credentials: grpc.ChannelCredentials | None = None,
) -> None:
    """Until the server at ``target`` answers SERVING (over TLS with ``credentials``)."""
    deadline = time.monotonic() + seconds
    channel = (
        grpc.secure_channel(target, credentials) if credentials else grpc.insecure_channel(target)
    )
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if status.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                time.sleep(0.2)
    raise AssertionError("server did not become SERVING")


def postgres_for(data_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(attrs=["name", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["name"] == "postgres" and str(data_dir) in cmdline:
            found.append(proc)
    return found


def test_embedded_server_serves_then_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """With no database URL the server starts its own PostgreSQL, mints a dev key once into its
    file (logging the file, not the key), serves, and on SIGTERM drains, exits 0 and leaves no
    PostgreSQL running; every line it wrote is JSON."""
    os.chmod(tmp_path, 0o755)
    data, port = tmp_path / "data", free_port()
    env = {**os.environ, "BRAIN_DATA_DIR": str(data), "BRAIN_DEV_KEY_FILE": str(tmp_path / "key"),
           "BRAIN_EMBEDDER": "none"}  # fmt: skip
    env.pop("BRAIN_DATABASE_URL", None)
    proc = subprocess.Popen(
        [*SERVER, "--listen", f"127.0.0.1:{port}"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_serving(f"127.0.0.1:{port}", proc)
        key = (tmp_path / "key").read_text().strip()
        assert (tmp_path / "key").stat().st_mode & 0o777 == 0o600
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            saved = memory_pb2_grpc.MemoryServiceStub(channel).SaveMemory(
                memory_pb2.SaveMemoryRequest(
                    scope=common_pb2.Scope(namespace="ops"),
                    memory=common_pb2.MemoryDraft(content="embedded mode works"),
                ),
                metadata=(("authorization", f"Bearer {key}"),),
            )
        assert saved.memory.content == "embedded mode works"
        assert postgres_for(data)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None
        logged = proc.stderr.read()
        assert key not in logged  # the log names the file that holds the key, never the key
        assert str(tmp_path / "key") in logged
        for line in logged.splitlines():  # every line is one JSON object (the default format)
            assert isinstance(json.loads(line), dict), line
        deadline = time.monotonic() + 30
        while postgres_for(data) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert postgres_for(data) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_startup_errors_are_one_clear_line(tmp_path: Path, pg_cluster: PgCluster) -> None:
    """A bad URL, an unreachable database and a busy port each exit 2 with one line saying why."""
    pepper = tmp_path / "pepper"
    pepper.write_bytes(os.urandom(32))
    pepper.chmod(0o600)
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    cases = [
        ({"BRAIN_DATABASE_URL": "mysql://x@db/brain"}, "is not a postgresql:// URL"),
        ({"BRAIN_DATABASE_URL": f"postgresql://u:secret@127.0.0.1:{free_port()}/brain"},
         "cannot connect to the database at postgresql://u:***@"),
    ]  # fmt: skip
    try:
        for extra, needle in cases:
            env = {
                **os.environ,
                "BRAIN_PEPPER_FILE": str(pepper),
                "BRAIN_EMBEDDER": "none",
                "BRAIN_LOG_LEVEL": "critical",  # the quietest: why it stopped still shows
                **extra,
            }
            done = subprocess.run(
                [*SERVER, "--listen", f"127.0.0.1:{free_port()}"],
                env=env, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert done.returncode == 2, done.stderr
            errors = [line for line in done.stderr.splitlines() if "brain-server: error:" in line]
            assert len(errors) == 1 and needle in errors[0], done.stderr
            # One JSON line (the default format), so a log pipeline keeps why it stopped.
            assert json.loads(errors[0])["level"] == "critical", errors[0]
            assert "secret" not in done.stderr
        env = {**os.environ, "BRAIN_DATA_DIR": str(tmp_path / "data"), "BRAIN_EMBEDDER": "none"}
        env.pop("BRAIN_DATABASE_URL", None)
        os.chmod(tmp_path, 0o755)
        done = subprocess.run(
            [*SERVER, "--listen", f"127.0.0.1:{busy.getsockname()[1]}"],
            env=env, capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
        assert done.returncode == 2
        assert "brain-server: error: cannot listen on" in done.stderr
        assert "add_port" not in done.stderr  # one line, not gRPC's own error before it
        assert postgres_for(tmp_path / "data") == []
        # A port another brain-server holds in its reuse-port group (as --workers does) is
        # taken too, with the default workers: joining the group would split its traffic.
        other = socket.socket()
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        try:
            done = subprocess.run(
                [*SERVER, "--listen", f"127.0.0.1:{other.getsockname()[1]}", "--workers", "2"],
                env=env, capture_output=True, text=True, timeout=90, check=False,
            )  # fmt: skip
        finally:
            other.close()
        assert done.returncode == 2, done.stderr
        assert "brain-server: error: cannot listen on" in done.stderr
        # Positive control: the same scan finds the session's running embedded PostgreSQL.
        assert postgres_for(pg_cluster.embedded_pg.data_dir)
    finally:
        busy.close()


def test_a_restart_after_kill_9_adopts_postgres_and_stops_it_on_sigterm(tmp_path: Path) -> None:
    """kill -9 of brain-server leaves its PostgreSQL running; the next server adopts that
    cluster, serves, and on SIGTERM stops it, so no PostgreSQL for the data dir remains."""
    os.chmod(tmp_path, 0o755)
    data = tmp_path / "data"
    env = {**os.environ, "BRAIN_DATA_DIR": str(data), "BRAIN_EMBEDDER": "none"}
    env.pop("BRAIN_DATABASE_URL", None)
    procs: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        port = free_port()
        proc = subprocess.Popen(
            [*SERVER, "--listen", f"127.0.0.1:{port}"], env=env, stderr=subprocess.PIPE, text=True
        )
        procs.append(proc)
        wait_serving(f"127.0.0.1:{port}", proc)
        return proc

    try:
        crashed = start()
        crashed.kill()
        crashed.wait(timeout=30)
        orphans = postgres_for(data)
        assert orphans, "the crashed server's PostgreSQL should still be running"
        survivor = start()
        assert {p.pid for p in postgres_for(data)} >= {p.pid for p in orphans}  # adopted
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while postgres_for(data) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert postgres_for(data) == []
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for leftover in postgres_for(data):
            leftover.kill()
