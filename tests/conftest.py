"""Shared fixtures: one embedded PostgreSQL per test session and a real gRPC server.

The server runs on its own event loop in a background thread, so both sync and async
clients can call it from tests. Nothing here mocks the database or gRPC.

``make test-external`` points the same fixtures at a deployment instead (all unset by
default): ``BRAIN_TEST_ADMIN_DATABASE_URL`` (owner) and ``BRAIN_TEST_DATABASE_URL`` (the
app login role) replace the embedded cluster, ``BRAIN_TEST_PEPPER_FILE`` is the pepper the
deployed server uses, and ``BRAIN_TEST_TARGET`` (with ``BRAIN_TEST_TLS_CA``) replaces the
in-process ``brain_server`` with a running brain-server process.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import grpc
import pytest

from brain.authz import Confinement, parse_permissions
from brain.server.runtime import embedded
from brain.server.runtime.app import RunningServer, start_server
from brain.server.runtime.bootstrap import prepare_embedded
from brain.server.runtime.config import Settings
from brain.server.storage import admin
from brain.server.telemetry import logs

from .zygote import run_module

T = TypeVar("T")

# Every worker logs as a server does at --log-level warning, from its first test: an
# in-process server started by a module's own fixture would otherwise log each call through
# structlog's unconfigured defaults (a console line rendered per call, for nobody).
logs.configure("warning")


class LoopThread:
    """An asyncio loop in a daemon thread; ``run`` executes a coroutine there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Wait as long as it takes: pytest-timeout is the one limit on a stuck test."""
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


# brain-server subprocesses run one process unless a test asks for workers (the default,
# one per core, would multiply every server test's start-up and memory).
os.environ.setdefault("BRAIN_WORKERS", "1")
EXTERNAL_OWNER_DSN = os.environ.get("BRAIN_TEST_ADMIN_DATABASE_URL", "")
EXTERNAL_APP_DSN = os.environ.get("BRAIN_TEST_DATABASE_URL", "")
EXTERNAL_PEPPER_FILE = os.environ.get("BRAIN_TEST_PEPPER_FILE", "")
EXTERNAL_TARGET = os.environ.get("BRAIN_TEST_TARGET", "")
EXTERNAL_TLS_CA = os.environ.get("BRAIN_TEST_TLS_CA", "")


@dataclass
class PgCluster:
    pg: embedded.EmbeddedPostgres | None  # None: an external database (make test-external)
    pepper_file: Path
    pepper: bytes
    external_owner_dsn: str = ""
    external_app_dsn: str = ""

    @property
    def owner_dsn(self) -> str:
        return self.external_owner_dsn or self.embedded_pg.owner_dsn

    @property
    def app_dsn(self) -> str:
        return self.external_app_dsn or self.embedded_pg.app_dsn

    @property
    def embedded_pg(self) -> embedded.EmbeddedPostgres:
        """The embedded cluster (its superuser); tests needing it skip on a deployment."""
        if self.pg is None:
            pytest.skip("needs the embedded cluster's superuser; this run targets a deployment")
        return self.pg


# The in-process brain-servers running now, in start order. One server's background work
# reaches other tests' rows: its chunk-vector filler serves every tenant of the database
# (`fillers_held`).
RUNNING: list[BrainServer] = []


@dataclass
class BrainServer:
    """A real brain-server on loopback, plus admin helpers for tests."""

    cluster: PgCluster
    loop: LoopThread
    settings: Settings
    running: RunningServer | None = None
    external_target: str = ""  # a brain-server process this session did not start
    tls_ca: bytes | None = None
    _tenants: set[str] = field(default_factory=set)

    @property
    def target(self) -> str:
        if self.external_target:
            return self.external_target
        assert self.running is not None
        return f"127.0.0.1:{self.running.port}"

    def channel(self) -> grpc.aio.Channel:
        """An asyncio channel to this server, over TLS when it serves TLS."""
        if self.tls_ca is None:
            return grpc.aio.insecure_channel(self.target)
        return grpc.aio.secure_channel(self.target, grpc.ssl_channel_credentials(self.tls_ca))

    def start(self) -> None:
        if self.external_target:
            pytest.skip("cannot start or restart a deployed brain-server from a test")
        self.running = self.loop.run(start_server(self.settings))
        RUNNING.append(self)
        # Pin the port so restart() comes back on the same address.
        self.settings = Settings(**{**self.settings.__dict__, "listen": self.target})

    def stop(self) -> None:
        RUNNING[:] = [s for s in RUNNING if s is not self]
        if self.running is not None:
            self.loop.run(self.running.stop(grace=1.0))

    async def restart(self, down_for: float = 0.0) -> None:
        """Stop the gRPC server and start it again on the same port."""
        await asyncio.to_thread(self.stop)
        if down_for:
            await asyncio.sleep(down_for)
        await asyncio.to_thread(self.start)

    def mint_key(
        self,
        tenant: str,
        principal: str,
        *,
        permissions: str = "memories:read,memories:write",
        user: str | None = None,
        namespaces: tuple[str, ...] = (),
        session: str | None = None,
        labels: tuple[str, ...] = ("team",),
        expires_in_seconds: float | None = None,
    ) -> str:
        """Create the tenant if needed and return a full API key."""
        return self.loop.run(
            self._mint(
                tenant,
                principal,
                permissions,
                user,
                namespaces,
                session,
                labels,
                expires_in_seconds,
            )
        )

    async def _mint(
        self,
        tenant: str,
        principal: str,
        permissions: str,
        user: str | None,
        namespaces: tuple[str, ...],
        session: str | None,
        labels: tuple[str, ...],
        expires_in_seconds: float | None,
    ) -> str:
        from datetime import UTC, datetime, timedelta

        conn = await asyncpg.connect(self.cluster.owner_dsn)
        try:
            async with conn.transaction():
                if not await conn.fetchval("SELECT 1 FROM tenants WHERE name = $1", tenant):
                    await admin.create_tenant(conn, tenant)
                minted = await admin.mint_key(
                    conn,
                    self.cluster.pepper,
                    tenant=tenant,
                    principal=principal,
                    permissions=parse_permissions(permissions),
                    confinement=Confinement(
                        user_id=user, namespaces=frozenset(namespaces), session_id=session
                    ),
                    labels=frozenset(labels),
                    expires_at=(
                        datetime.now(UTC) + timedelta(seconds=expires_in_seconds)
                        if expires_in_seconds is not None
                        else None
                    ),
                )
        finally:
            await conn.close()
        return minted.key

    def admin(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run brain-admin in a process of its own against this cluster, as the owner
        (`python -m brain.server.admin.main`, forked from tests/zygote.py)."""
        done = run_module(
            "brain.server.admin.main",
            "--database-url", self.cluster.owner_dsn,
            "--pepper-file", str(self.cluster.pepper_file),
            *args,
            timeout=60,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"brain-admin {args} failed: {done.stderr}")
        return done

    def sql(self, query: str, *args: Any) -> list[asyncpg.Record]:
        """Run SQL as the owner (sees every tenant), for checks behind the API's back."""

        async def run() -> list[asyncpg.Record]:
            conn = await asyncpg.connect(self.cluster.owner_dsn)
            try:
                return list(await conn.fetch(query, *args))
            finally:
                await conn.close()

        return self.loop.run(run())


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture(scope="session")
def pg_cluster(loop_thread: LoopThread) -> Iterator[PgCluster]:
    """A private PostgreSQL + pgvector for the whole session, removed afterwards."""
    if EXTERNAL_OWNER_DSN:
        pepper_file = Path(EXTERNAL_PEPPER_FILE)
        yield PgCluster(
            pg=None,
            pepper_file=pepper_file,
            pepper=pepper_file.read_bytes(),
            external_owner_dsn=EXTERNAL_OWNER_DSN,
            external_app_dsn=EXTERNAL_APP_DSN,
        )
        return
    root = Path(tempfile.mkdtemp(prefix="brain-test-"))
    os.chmod(root, 0o755)
    pg = embedded.start(root / "pg", delete_on_stop=True)
    try:
        loop_thread.run(prepare_embedded(pg))
        loop_thread.run(commit_without_waiting_for_the_disk(pg.owner_dsn))
        pepper_file = root / "pepper"
        pepper = secrets.token_bytes(32)
        pepper_file.write_bytes(pepper)
        pepper_file.chmod(0o600)  # as an operator keeps it: the server warns otherwise
        yield PgCluster(pg=pg, pepper_file=pepper_file, pepper=pepper)
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


async def commit_without_waiting_for_the_disk(owner_dsn: str) -> None:
    """The session's database commits without waiting for its WAL to be flushed to disk
    (synchronous_commit = off, for every connection made from now on). A commit is
    visible to every other connection exactly as before; only a crash of this throwaway
    cluster could lose the last ones. Tests then wait less on a disk that other work on
    the machine flushes too. No test stops or kills this cluster's postmaster."""
    conn = await asyncpg.connect(owner_dsn)
    try:
        await conn.execute(f"ALTER DATABASE {embedded.DATABASE} SET synchronous_commit = off")
    finally:
        await conn.close()


@contextmanager
def fillers_held() -> Iterator[None]:
    """The chunk-vector filler of every in-process server running now (the session's, a
    module's `walled_server`, any other test's) stopped for the block, so that no filler
    but those a test starts inside it reaches its chunks; each started again afterwards if
    its server still runs. A deployed server (``BRAIN_TEST_TARGET``) is not reached: make
    test-citus serves with ``--embedder none``, which runs no filler."""
    held = [
        (server, server.running.filler)
        for server in list(RUNNING)
        if server.running is not None and server.running.filler is not None
    ]
    for server, filler in held:
        server.loop.run(filler.stop())
    try:
        yield
    finally:
        for server, filler in held:
            running = server.running
            if (
                any(s is server for s in RUNNING)
                and running is not None
                and running.filler is filler
            ):
                server.loop.loop.call_soon_threadsafe(filler.start)


def server_settings(cluster: PgCluster, **overrides: Any) -> Settings:
    base: dict[str, Any] = dict(
        listen="127.0.0.1:0",
        database_url=cluster.app_dsn,
        data_dir=cluster.pepper_file.parent,
        pepper_file=cluster.pepper_file,
        log_level="warning",
        rate_limit=1000.0,
        rate_burst=1000,
    )
    base.update(overrides)
    return Settings(**base)


@pytest.fixture(scope="session")
def brain_server(pg_cluster: PgCluster, loop_thread: LoopThread) -> Iterator[BrainServer]:
    """A real brain-server on 127.0.0.1 (random port) backed by the session cluster."""
    logs.configure("warning")
    if EXTERNAL_TARGET:
        yield BrainServer(
            cluster=pg_cluster,
            loop=loop_thread,
            settings=server_settings(pg_cluster),
            external_target=EXTERNAL_TARGET,
            tls_ca=Path(EXTERNAL_TLS_CA).read_bytes() if EXTERNAL_TLS_CA else None,
        )
        return
    server = BrainServer(cluster=pg_cluster, loop=loop_thread, settings=server_settings(pg_cluster))
    server.start()
    yield server
    server.stop()


def unique(prefix: str) -> str:
    """A name no other test uses (tenants, users, namespaces)."""
    return f"{prefix}-{secrets.token_hex(4)}"


@pytest.fixture
async def channel(brain_server: BrainServer) -> Any:
    async with brain_server.channel() as ch:
        yield ch


SPARE_DATABASES = [d for d in os.environ.get("BRAIN_TEST_SPARE_DATABASES", "").split(",") if d]


def _with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))


@pytest.fixture
def fresh_database(pg_cluster: PgCluster, loop_thread: LoopThread) -> Iterator[tuple[str, str]]:
    """An empty database on the test's PostgreSQL: (owner DSN, app-role DSN)."""
    if pg_cluster.pg is None:
        if not SPARE_DATABASES:
            pytest.skip("no spare database on this deployment (BRAIN_TEST_SPARE_DATABASES)")
        name = SPARE_DATABASES.pop()
        yield (
            _with_database(pg_cluster.owner_dsn, name),
            _with_database(pg_cluster.app_dsn, name),
        )
        return
    pg = pg_cluster.embedded_pg
    name = unique("deploy").replace("-", "_")

    async def sql(statement: str) -> None:
        conn = await asyncpg.connect(pg.bootstrap_dsn)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    loop_thread.run(sql(f"CREATE DATABASE {name}"))
    yield pg.dsn("postgres", name), pg.dsn("brain_server", name)
    loop_thread.run(sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture(scope="module", params=["app-filter", "rls-only"])
def walled_server(
    request: pytest.FixtureRequest,
    brain_server: BrainServer,
    pg_cluster: PgCluster,
    loop_thread: LoopThread,
) -> Iterator[BrainServer]:
    """The session server, then one with the application's visibility predicate switched
    off, so that row-level security alone must give the same answers."""
    if request.param == "app-filter":
        yield brain_server
        return
    rls_only = BrainServer(
        cluster=pg_cluster, loop=loop_thread, settings=server_settings(pg_cluster, app_filter=False)
    )
    rls_only.start()
    yield rls_only
    rls_only.stop()


@pytest.fixture(scope="module", params=["app-filter", "rls-only"])
def lexical_walled_server(
    request: pytest.FixtureRequest, pg_cluster: PgCluster, loop_thread: LoopThread
) -> Iterator[BrainServer]:
    """`walled_server` without an embedder, for modules about the lexical lanes alone (every
    search lexical): a server with the application's visibility predicate, then one with it
    switched off. Their hundreds of saves then store no vector, which the real model would
    make for each one and no lexical search reads."""
    server = BrainServer(
        cluster=pg_cluster,
        loop=loop_thread,
        settings=server_settings(
            pg_cluster, embedder="none", app_filter=request.param == "app-filter"
        ),
    )
    server.start()
    yield server
    server.stop()


# The modules holding the suite's longest tests (seconds each: server processes, installs,
# hundreds of saves), longest first. pytest-xdist hands out modules in collection order
# (`make test`: --dist loadfile --no-loadscope-reorder), so these start first and the
# short ones fill the end evenly, instead of one worker finishing a long module alone while
# the other waits. Only the order changes; a module not listed (or renamed) keeps its place
# after these. test_installed comes after a minute or so of work, when `make test`'s build
# (tests/dist.py --alongside) is done, and the tests that time a server process's restart
# after it, when that build no longer takes a core.
LONGEST_FIRST = (
    "test_search_review",
    "test_quotas",
    "test_audit",
    "test_edge_property_walls",
    "test_installed",
    "test_restarts",
    "test_server_process",
    "test_embedded_memory",
    "test_bench",
    "test_workers",
    "test_docs",
    "test_search_scale",
    "test_mcp_agent",
    "test_evaluation",
    "test_mcp_proxy",
    "test_races",
    "test_review",
    "test_deployment",
    "test_trust_gaps",
    "test_conflicts",
    "test_lifecycle",
    "test_graph",
    "test_knowledge_filler",
    "test_retrieval",
    "test_multilingual",
    "test_outage",
)


@pytest.hookimpl(trylast=True)  # after pytest's own ordering (fixtures' parameters)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # A stable sort: each module's tests keep their order and stay together.
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))
