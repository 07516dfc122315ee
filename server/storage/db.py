"""The connection pool and tenant-bound transactions.

Every transaction that touches tenant rows first sets ``brain.tenant_id`` (read by the
row-level security policies), the acting key and principal (read by audit triggers),
and a statement timeout derived from the RPC deadline — all transaction-local, by
``SET LOCAL`` (storage/setlocal.py); a write transaction also queues the NOTIFY that
wakes the tenant's watchers at commit (on a Citus coordinator as a statement of its own).
Database errors become domain errors here, at this one boundary.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import asyncpg
import structlog
from pgvector.asyncpg import register_vector

from brain.authz import Caller, Confinement, KeyRecord, KeyStoreUnavailable, Permission
from brain.server.errors import (
    BrainError,
    Conflict,
    DeadlineExceeded,
    StorageFull,
    Unavailable,
)
from brain.server.storage import audit, migrate, setlocal
from brain.server.telemetry import metrics

_log = structlog.get_logger("brain.db")
DEFAULT_STATEMENT_TIMEOUT_MS = 10_000
# Read-your-writes on a replica: how long a key's read waits for the replica to replay
# that key's last write before it reads from the primary instead.
REPLICA_CATCH_UP_S = 0.5
UNCONFINED = Confinement()
UNAVAILABLE_MESSAGE = "the database is unavailable; retry shortly"
DISK_FULL_MESSAGE = (
    "the database is out of disk space; writes fail until an operator frees space "
    "(reads still work)"
)
# Everything asyncpg raises, including InternalClientError: the protocol state a
# connection is left in when it broke in the middle of an operation.
DATABASE_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)


def outage(exc: BaseException) -> BrainError | None:
    """The domain error for a database fault the caller did not cause, else None.

    Losing the server (refused, reset, shut down, crashed, restarting, out of connections)
    is UNAVAILABLE, so clients retry; a full disk is RESOURCE_EXHAUSTED with a clear message.
    """
    if isinstance(exc, asyncpg.QueryCanceledError):
        return DeadlineExceeded("the request ran out of time in the database")
    if isinstance(exc, asyncpg.DiskFullError):
        _log.error("database disk full", sqlstate=exc.sqlstate)
        return StorageFull(DISK_FULL_MESSAGE)
    if isinstance(
        exc,
        OSError
        | TimeoutError
        | asyncpg.PostgresConnectionError
        | asyncpg.OperatorInterventionError
        | asyncpg.TooManyConnectionsError,
    ):
        return Unavailable(UNAVAILABLE_MESSAGE)
    if isinstance(exc, asyncpg.FeatureNotSupportedError) and "cannot PREPARE" in str(exc):
        # On Citus, a write that reached two workers commits by two-phase commit, which a
        # NOTIFY a worker ran forbids (Database.notify_apart keeps the server's own off the
        # workers): nothing was written; retry (deploy/SCALING.md).
        return Unavailable(UNAVAILABLE_MESSAGE)
    if isinstance(exc, asyncpg.InternalClientError):
        # asyncpg's protocol state after its connection broke in the middle of an operation.
        _log.warning("database connection broke mid-operation", error=str(exc))
        return Unavailable(UNAVAILABLE_MESSAGE)
    if isinstance(exc, asyncpg.InterfaceError) and (
        "closed" in str(exc) or "connection" in str(exc)
    ):
        return Unavailable(UNAVAILABLE_MESSAGE)
    return None


class UnsafeRole(Exception):
    """The server's database role could read past row-level security."""


async def _keep_session(conn: asyncpg.Connection) -> None:
    """A pool's reset on release, which sends nothing: asyncpg has already rolled back a
    transaction left open and dropped the listeners (``Connection._reset``). Its default
    reset is one more round trip per checkout (``RESET ALL``, ``UNLISTEN *``, ``CLOSE
    ALL``, advisory unlocks), and a request checks out twice (its key, its transaction).
    Nothing the server runs on a pool connection outlives its transaction: every setting
    is ``SET LOCAL`` (storage/setlocal.py), advisory locks are transaction locks, cursors
    close at commit, and the change feed LISTENs on a connection of its own.
    tests/test_pool_session.py holds the server to that."""


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    await register_vector(conn)
    conn.add_query_logger(metrics.log_query)  # statement timeouts and SQL spans


class Database:
    """An asyncpg pool plus the few statements that are not tenant-bound.

    With a read replica, transactions asked for with ``replica=True`` read there, unless
    the same key wrote through this process since and the replica has not replayed that
    write within ``REPLICA_CATCH_UP_S`` (then they read from the primary).
    """

    def __init__(self, pool: asyncpg.Pool, dsn: str, replica: asyncpg.Pool | None = None) -> None:
        self.pool = pool
        self.dsn = dsn  # for connections that must outlive a pool checkout (LISTEN)
        self.replica = replica
        self._written: dict[str, str] = {}  # key id -> primary WAL position after its last write
        self._probe: asyncio.Task[bool] | None = None  # the health probe in flight, if any
        # On a Citus coordinator a write's NOTIFY is a statement of its own, not part of the
        # settings' string: Citus replays the whole query string of a SET LOCAL on every
        # worker connection the transaction opens (citus.propagate_set_commands), NOTIFY
        # and all, and a transaction whose write reached two workers (a shard group moving
        # under it) then fails at commit: a worker cannot PREPARE a transaction that has
        # executed NOTIFY. Sent apart, it runs on the coordinator only, still delivered at
        # commit and only if it commits.
        self.notify_apart = False

    @classmethod
    async def connect(
        cls, dsn: str, *, min_size: int = 1, max_size: int = 10, replica_dsn: str | None = None
    ) -> Database:
        pool = await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, init=_init_connection, reset=_keep_session
        )
        replica = None
        if replica_dsn is not None:
            try:
                replica = await asyncpg.create_pool(
                    replica_dsn,
                    min_size=min_size,
                    max_size=max_size,
                    init=_init_connection,
                    reset=_keep_session,
                )
            except BaseException:
                await pool.close()
                raise
        return cls(pool, dsn, replica)

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()  # an abandoned probe may still wait on a frozen server
        await self.pool.close()
        if self.replica is not None:
            await self.replica.close()

    async def _read_pool(self, key_id: str) -> asyncpg.Pool:
        """The replica, once it has replayed this key's last write; else the primary."""
        assert self.replica is not None
        written = self._written.get(key_id)
        deadline = asyncio.get_running_loop().time() + REPLICA_CATCH_UP_S
        try:
            while True:
                caught_up = written is None or await self.replica.fetchval(
                    """SELECT COALESCE(pg_last_wal_replay_lsn() >= $1::text::pg_lsn,
                                       NOT pg_is_in_recovery())""",
                    written,
                )
                if caught_up:
                    if written is not None and self._written.get(key_id) == written:
                        del self._written[key_id]  # later reads need not ask again
                    return self.replica
                if asyncio.get_running_loop().time() >= deadline:
                    return self.pool
                await asyncio.sleep(0.01)
        except (
            OSError,
            asyncpg.PostgresConnectionError,
            asyncpg.ConnectionDoesNotExistError,
        ) as exc:
            _log.warning("read replica unavailable; reading from the primary", error=str(exc))
            return self.pool

    async def check_role_is_confined(self) -> None:
        """Refuse to serve through a role that is superuser, bypasses RLS, or owns tables."""
        for pool in (self.pool, self.replica):
            if pool is not None:
                await _check_role_is_confined(pool)

    @asynccontextmanager
    async def tenant_tx(
        self,
        tenant_id: str,
        *,
        key_id: str = "",
        principal: str = "",
        method: str = "",
        labels: frozenset[str] = frozenset(),
        confinement: Confinement = UNCONFINED,
        may_review: bool = False,
        timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS,
        readonly: bool = False,
        replica: bool = False,
    ) -> AsyncIterator[asyncpg.Connection]:
        """A transaction in which RLS shows one tenant, within the key's confinement and labels
        (and, to keys that may review, every proposal)."""
        pool = self.pool
        if replica and readonly and self.replica is not None:
            pool = await self._read_pool(key_id)
        died_under = False  # read before release: a released proxy refuses every call
        auditing = False
        try:
            name = "replica" if pool is self.replica else "primary"
            async with metrics.acquire(pool, name) as conn:
                try:
                    # A read sees one snapshot across its statements (a search ranks in
                    # one and reads the hits it returns in another); read-only, it cannot
                    # fail on a concurrent write.
                    isolation = "repeatable_read" if readonly else None
                    async with conn.transaction(isolation=isolation, readonly=readonly):
                        prologue = setlocal.statements(
                            {
                                "brain.tenant_id": tenant_id,
                                "brain.key_id": key_id,
                                "brain.principal": principal,
                                "brain.method": method,
                                "statement_timeout": str(max(1, timeout_ms)),
                                "brain.labels": _pg_array(labels),
                                "brain.confine_user_id": confinement.user_id or "",
                                "brain.confine_namespaces": (
                                    _pg_array(confinement.namespaces)
                                    if confinement.namespaces
                                    else ""
                                ),
                                "brain.confine_session_id": confinement.session_id or "",
                                "brain.may_review": "on" if may_review else "",
                            }
                        )
                        if not readonly:
                            # Wakes the tenant's watchers (domain/watch.py), delivered at
                            # commit and only if it commits. Sent from this connection (the
                            # coordinator on Citus), not by the audit trigger, which runs on
                            # the shard's worker (migration 0033).
                            notify = f"NOTIFY {audit.NOTIFY_CHANNEL}, "
                            notify += setlocal.literal(tenant_id)
                            if self.notify_apart:
                                await conn.execute(prologue)
                                prologue = notify
                            else:
                                prologue += f";\n{notify}"
                        await conn.execute(prologue)  # one round trip, simple query
                        yield conn
                        auditing = not readonly and await metrics.audit_pending(conn)
                    if auditing:  # committed
                        metrics.AUDIT_EVENTS.inc()
                    if not readonly and key_id and self.replica is not None:
                        # After commit: the position a replica must reach to show this write.
                        self._written[key_id] = await conn.fetchval(
                            "SELECT pg_current_wal_insert_lsn()::text"
                        )
                except BaseException:
                    died_under = conn.is_closed()
                    raise
        except BrainError:
            raise
        except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError) as exc:
            raise Conflict(
                "a concurrent change to the same memories won; read them again and retry"
            ) from exc
        except Exception as exc:
            translated = outage(exc)
            if translated is None and died_under:
                # Whatever failed, it failed because the connection died under it.
                translated = Unavailable(UNAVAILABLE_MESSAGE)
            if translated is None:
                raise
            raise translated from exc

    def caller_tx(
        self,
        caller: Caller,
        *,
        timeout_ms: int | None,
        cap_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS,
        readonly: bool = False,
        replica: bool = False,
    ) -> AbstractAsyncContextManager[asyncpg.Connection]:
        """A tenant transaction bound to an authenticated caller's key, scope and deadline."""
        return self.tenant_tx(
            caller.tenant_id,
            key_id=caller.key.key_id,
            principal=caller.principal,
            method=caller.method,
            labels=caller.key.labels,
            confinement=caller.key.confinement,
            may_review=caller.has(Permission.REVIEW.value),
            timeout_ms=min(timeout_ms or cap_ms, cap_ms),
            readonly=readonly,
            replica=replica,
        )

    async def text_match_is_leakproof(self) -> bool:
        """Whether lexical searches can use the GIN indexes under row-level security."""
        return bool(await self.pool.fetchval(migrate.IS_LEAKPROOF, migrate.TEXT_MATCH))

    async def is_distributed(self) -> bool:
        """Whether the database is a Citus coordinator (the citus extension is installed)."""
        return bool(
            await self.pool.fetchval("SELECT count(*) FROM pg_extension WHERE extname = 'citus'")
        )

    async def embedding_dimension(self) -> int:
        """The dimension the schema's vector column was declared with."""
        return await embedding_dimension(self.pool)

    async def lookup_key(self, key_id: str) -> KeyRecord | None:
        """The key with this public id, across tenants (through a definer function)."""
        try:
            row = await self.pool.fetchrow("SELECT * FROM brain_lookup_key($1)", key_id)
        except DATABASE_ERRORS as exc:
            if outage(exc) is None:
                raise
            raise KeyStoreUnavailable(UNAVAILABLE_MESSAGE) from exc
        if row is None:
            return None
        return key_record(row)

    async def touch_key(self, key_id: str) -> None:
        """Note a key's use; a full disk skips the note (it is coarse) rather than the call."""
        try:
            await self.pool.execute("SELECT brain_touch_key($1)", key_id)
        except asyncpg.DiskFullError:
            _log.warning("database disk full; last_used_at not updated", key_id=key_id)
        except DATABASE_ERRORS as exc:
            if outage(exc) is None:
                raise
            raise KeyStoreUnavailable(UNAVAILABLE_MESSAGE) from exc

    async def ping(self, seconds: float) -> bool:
        """Whether the database answers a trivial query within ``seconds``.

        The probe runs as its own task and is abandoned, not awaited, once ``seconds`` pass:
        against a frozen server even cancelling a query can wait on the socket, and the
        answer "not reachable" must not wait with it. While an abandoned probe is still
        stuck, later pings wait on it instead of piling up new ones.
        """
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._select_one(seconds), name="database-probe")
        done, _ = await asyncio.wait({self._probe}, timeout=seconds)
        return bool(done) and self._probe.result()

    async def _select_one(self, seconds: float) -> bool:
        try:
            async with asyncio.timeout(seconds):
                await self.pool.fetchval("SELECT 1")
        except DATABASE_ERRORS:
            return False
        return True


async def _check_role_is_confined(pool: asyncpg.Pool) -> None:
    row = await pool.fetchrow(
        """SELECT r.rolname, r.rolsuper, r.rolbypassrls,
                  EXISTS (SELECT 1 FROM pg_tables t
                          WHERE t.tablename IN ('memories', 'api_keys', 'tenants',
                                                'audit_events', 'audit_heads', 'tombstones')
                            AND pg_has_role(current_user, t.tableowner, 'MEMBER')) AS owns
           FROM pg_roles r WHERE r.rolname = current_user"""
    )
    assert row is not None
    if row["rolsuper"] or row["rolbypassrls"] or row["owns"]:
        raise UnsafeRole(
            f"database role {row['rolname']!r} is a superuser, bypasses row-level "
            "security, or owns the brain tables; connect the server as a member of "
            "brain_app (see README, Deployment)"
        )


async def embedding_dimension(conn: asyncpg.Pool | asyncpg.Connection) -> int:
    value: int = await conn.fetchval(
        """SELECT atttypmod FROM pg_attribute
           WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"""
    )
    return value


def _pg_array(values: frozenset[str]) -> str:
    """A text[] literal; names are validated to hold no quotes, commas or braces."""
    return "{" + ",".join(f'"{v}"' for v in sorted(values)) + "}"


def key_record(row: Any) -> KeyRecord:
    return KeyRecord(
        tenant_id=str(row["tenant_id"]),
        tenant_name=row["tenant_name"],
        key_id=row["key_id"],
        principal=row["principal"],
        permissions=frozenset(row["permissions"]),
        confinement=Confinement(
            user_id=row["confine_user_id"],
            namespaces=frozenset(row["confine_namespaces"] or ()),
            session_id=row["confine_session_id"],
        ),
        labels=frozenset(row["labels"]),
        secret_hash=bytes(row["secret_hash"]),
        expires_at=row["expires_at"],
        revoked_at=row["revoked_at"],
    )
