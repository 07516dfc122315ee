"""A brain to evaluate against: a fresh private server (embedded PostgreSQL + brain-server,
removed on exit) or a running one, and the bucket each conversation or corpus goes to.

Shared by `brain-eval` (LoCoMo and knowledge) and the benchmarks; ``worker_server`` puts a
``brain-server --workers N`` on a private server's database.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from brain.authz import Confinement
from brain.server.domain.knowledge.filler import ChunkFiller
from brain.server.domain.memories import Memories
from brain.server.domain.retrieval.lanes import RetrievalParams
from brain.server.measure.cpu import Watched
from brain.server.runtime import embedded
from brain.server.runtime.app import start_server
from brain.server.runtime.bootstrap import prepare_embedded
from brain.server.runtime.config import (
    Settings,
)
from brain.server.storage import admin
from brain.v1 import common_pb2


@dataclass(frozen=True)
class Bucket:
    """Where one conversation lives: the key to call with and the namespace."""

    api_key: str
    namespace: str

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.api_key}"),)

    @property
    def scope(self) -> common_pb2.Scope:
        return common_pb2.Scope(namespace=self.namespace)


def _fresh_name(sample_id: str) -> str:
    """``locomo-<sample_id>-<random>``, valid as a tenant name and as a namespace."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", sample_id).strip("-._")[:40] or "conversation"
    return f"locomo-{slug}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class RemoteBrain:
    """A running server: every conversation goes to a fresh namespace under one key."""

    address: str
    api_key: str

    async def bucket(self, sample_id: str) -> Bucket:
        return Bucket(api_key=self.api_key, namespace=_fresh_name(sample_id))

    def use(self, params: RetrievalParams) -> None:
        raise ValueError("--folds needs the private server; a --target keeps its parameters")


@dataclass(frozen=True)
class PrivateBrain:
    """The private server: every conversation gets a fresh tenant and key."""

    address: str
    owner_dsn: str
    pepper: bytes
    memories: Memories  # the in-process server's domain layer, to swap its parameters
    database_pid: int | None = None  # the embedded PostgreSQL's postmaster
    filler: ChunkFiller | None = None  # the in-process server's chunk-vector filler
    app_dsn: str = ""  # the app role's URL, where it is not the owner's with the app role

    def use(self, params: RetrievalParams) -> None:
        """Search with ``params`` from the next call on (the data stays as loaded)."""
        self.memories.params = params

    async def bucket(self, sample_id: str) -> Bucket:
        tenant = _fresh_name(sample_id)
        conn = await asyncpg.connect(self.owner_dsn)
        try:
            async with conn.transaction():
                await admin.create_tenant(conn, tenant)
                minted = await admin.mint_key(
                    conn,
                    self.pepper,
                    tenant=tenant,
                    principal="brain-eval",
                    permissions=frozenset({"memories:read", "memories:write", "memories:forget"}),
                    confinement=Confinement(),
                    labels=frozenset({"team"}),
                    expires_at=None,
                    description="brain-eval locomo",
                )
        finally:
            await conn.close()
        return Bucket(api_key=minted.key, namespace="locomo")


@contextlib.asynccontextmanager
async def private_brain(
    embedder: str,
    scratch_dir: Path | None = None,
    embedder_options: Mapping[str, Any] | None = None,
    database: tuple[str, str] | None = None,
) -> AsyncIterator[PrivateBrain]:
    """A fresh embedded PostgreSQL + brain-server, removed on exit (also on errors).

    ``embedder_options`` are further `Settings` fields such as ``openai_url``.
    ``database``: (owner URL, app role URL) of a migrated database to use instead of an
    embedded one (brain-bench --database-url, e.g. a Citus coordinator); left as it is.
    """
    root = Path(tempfile.mkdtemp(prefix="brain-eval-", dir=scratch_dir))
    pg: embedded.EmbeddedPostgres | None = None
    try:
        os.chmod(root, 0o755)  # as root the wheel runs PostgreSQL as another user
        if database is None:
            pg = embedded.start(root / "pg", delete_on_stop=True)
            await prepare_embedded(pg)
            owner_dsn, app_dsn = pg.owner_dsn, pg.app_dsn
        else:
            owner_dsn, app_dsn = database
        pepper = secrets.token_bytes(32)
        pepper_file = root / "pepper"
        pepper_file.write_bytes(pepper)
        pepper_file.chmod(0o600)
        settings = Settings(
            listen="127.0.0.1:0",
            database_url=app_dsn,
            data_dir=root,
            pepper_file=pepper_file,
            log_level="warning",
            rate_limit=1e9,  # loading is a burst of thousands of calls from one key
            rate_burst=1_000_000,
            embedder=embedder,
            **(embedder_options or {}),
        )
        running = await start_server(settings)
        try:
            yield PrivateBrain(
                f"127.0.0.1:{running.port}", owner_dsn, pepper, running.memories,
                database_pid=pg.postmaster_pid() if pg is not None else None,
                filler=running.filler, app_dsn=app_dsn,
            )  # fmt: skip
        finally:
            await running.stop(grace=1.0)
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.asynccontextmanager
async def worker_server(
    brain: PrivateBrain, embedder: str, workers: int
) -> AsyncIterator[tuple[str, Watched]]:
    """The address to load and the server's processes: the private in-process server, or
    with ``workers`` > 1 a ``brain-server --workers N`` process on the same database."""
    if workers == 1:
        yield brain.address, Watched(os.getpid(), tree=False)  # not the driver, our child
        return
    with tempfile.TemporaryDirectory(prefix="brain-bench-") as scratch:
        pepper = Path(scratch) / "pepper"
        pepper.write_bytes(brain.pepper)
        pepper.chmod(0o600)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            address = f"127.0.0.1:{probe.getsockname()[1]}"
        env = {
            **os.environ,
            "BRAIN_DATABASE_URL": brain.app_dsn
            or brain.owner_dsn.replace(f"{embedded.OWNER_ROLE}@", f"{embedded.APP_LOGIN_ROLE}@", 1),
            "BRAIN_PEPPER_FILE": str(pepper), "BRAIN_DATA_DIR": scratch,
            "BRAIN_EMBEDDER": embedder, "BRAIN_WORKERS": str(workers),
            "BRAIN_RATE_LIMIT": "1e9", "BRAIN_RATE_BURST": "1000000", "BRAIN_LOG_LEVEL": "warning",
        }  # fmt: skip
        server = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "brain.server.runtime.main", "--listen", address, env=env
        )
        try:
            await _serving(address, server)
            yield address, Watched(server.pid)
        finally:
            server.send_signal(signal.SIGTERM)
            await asyncio.wait_for(server.wait(), 60)


async def _serving(address: str, server: asyncio.subprocess.Process) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for _ in range(600):
            if server.returncode is not None:
                raise RuntimeError(f"brain-server --workers exited with {server.returncode}")
            try:
                answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError("brain-server --workers did not start serving within 2 minutes")
