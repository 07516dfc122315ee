"""WatchMemories: the change feed, built on the audit log, of memories and (asked for with
``include_documents``) knowledge documents.

Every write transaction NOTIFYs ``brain_audit`` with ``<tenant id>`` when it commits
(storage/db.py: sent by the server, not by the audit trigger, which on Citus runs on a
worker; migration 0033). One LISTEN connection per server process (held only while someone watches)
wakes the watchers of that tenant; a slow poll covers lost notifications and a lost
listener. The notification carries no data a tenant could not see: each watcher then
reads the new events in its own tenant transaction, joined to the memory (and document)
versions they produced, through the same visibility predicate as every other read; it
finds them on the audit cells it may see (migration 0055), so its work never grows with
events it cannot see. The resume cursor is the audit seq, sealed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import structlog

from brain.authz import Caller, KeyStoreUnavailable, Permission
from brain.server.domain import cursors
from brain.server.domain import validation as check
from brain.server.domain.memories import Memories, row_filter
from brain.server.errors import InvalidArgument, PermissionDenied, Unavailable
from brain.server.storage import audit as sql
from brain.server.storage.db import Database
from brain.server.telemetry import metrics
from brain.v1 import memory_pb2

_log = structlog.get_logger("brain.watch")

ALL_STATUSES = ("active", "candidate", "superseded", "retracted", "rejected", "withdrawn")
CHANGE_KIND = {
    "save": memory_pb2.CHANGE_KIND_CREATED,
    "update": memory_pb2.CHANGE_KIND_UPDATED,
    "supersede": memory_pb2.CHANGE_KIND_SUPERSEDED,
    "forget": memory_pb2.CHANGE_KIND_FORGOTTEN,
    "propose": memory_pb2.CHANGE_KIND_PROPOSED,
    "approve": memory_pb2.CHANGE_KIND_APPROVED,
    "reject": memory_pb2.CHANGE_KIND_REJECTED,
    "withdraw": memory_pb2.CHANGE_KIND_WITHDRAWN,
    # A candidate for review again (issue 30): reopened when what replaced it was forgotten,
    # or a consolidation proposed by a reviewer.
    "reopen": memory_pb2.CHANGE_KIND_PROPOSED,
    "consolidate": memory_pb2.CHANGE_KIND_PROPOSED,
}
BATCH_EVENTS = 100
MAX_COLLECTIONS = 16
KEY_RECHECK_SECONDS = 5.0
# What the dedicated LISTEN connection may raise when the database goes away (a broken
# connection can leave asyncpg's protocol mid-operation: InternalClientError).
LISTENER_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)


class ChangeFeed:
    """Wakes a tenant's watchers when its audit log grows."""

    def __init__(
        self, db: Database, *, poll_seconds: float = 5.0, poll_seconds_unlistened: float = 0.5
    ) -> None:
        self.db = db
        self.poll_seconds = poll_seconds
        self.poll_seconds_unlistened = poll_seconds_unlistened
        self.closing = asyncio.Event()
        self._waiters: dict[str, set[asyncio.Event]] = {}
        # A dedicated connection, not a pool checkout: it lives as long as anyone watches,
        # and the pool's proxies cannot be used once it has reclaimed them.
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._releasing: asyncio.Future[None] | None = None

    @property
    def listening(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    @contextlib.asynccontextmanager
    async def subscribe(self, tenant_id: str) -> AsyncIterator[asyncio.Event]:
        """An event set whenever ``tenant_id`` may have new audit events."""
        woken = asyncio.Event()
        self._waiters.setdefault(tenant_id, set()).add(woken)
        metrics.WATCH_STREAMS.inc()
        try:
            await self._listen()
            yield woken
        finally:
            metrics.WATCH_STREAMS.dec()
            waiters = self._waiters.get(tenant_id)
            if waiters is not None:
                waiters.discard(woken)
                if not waiters:
                    del self._waiters[tenant_id]
            if not self._waiters:
                await self._unlisten()

    async def wait(self, woken: asyncio.Event) -> None:
        """Until notified, the poll interval passes, or the feed closes."""
        if not self.listening:
            await self._listen()
        timeout = self.poll_seconds if self.listening else self.poll_seconds_unlistened
        closing = asyncio.ensure_future(self.closing.wait())
        notified = asyncio.ensure_future(woken.wait())
        try:
            await asyncio.wait({closing, notified}, timeout=timeout, return_when="FIRST_COMPLETED")
        finally:
            closing.cancel()
            notified.cancel()
        woken.clear()

    async def close(self) -> None:
        """End every watch stream (server shutdown) and release the listener."""
        self.closing.set()
        await self._unlisten()

    def _notified(self, conn: object, pid: int, channel: str, payload: object) -> None:
        tenant_id = str(payload).partition(":")[0]
        for woken in self._waiters.get(tenant_id, ()):
            woken.set()

    def _lost(self, conn: object) -> None:
        if self.listening:
            return  # an earlier listener, already replaced
        _log.warning("change feed listener lost; polling until it is back")
        lost, self._conn = self._conn, None
        if lost is not None:
            # Close what is left of the dead connection.
            self._releasing = asyncio.ensure_future(self._release(lost))
        for waiters in self._waiters.values():
            for woken in waiters:
                woken.set()

    async def _release(self, conn: Any) -> None:
        with contextlib.suppress(*LISTENER_ERRORS):
            await conn.close(timeout=2)

    async def _listen(self) -> None:
        async with self._lock:
            if self.listening or self.closing.is_set() or not self._waiters:
                return
            if self._conn is not None:  # closed, and its termination callback not yet run
                stale, self._conn = self._conn, None
                await self._release(stale)
            try:
                conn = await asyncio.wait_for(asyncpg.connect(self.db.dsn), timeout=2)
            except LISTENER_ERRORS as exc:
                _log.warning("change feed cannot LISTEN; polling", error=str(exc))
                return
            try:
                await conn.add_listener(sql.NOTIFY_CHANNEL, self._notified)
            except LISTENER_ERRORS as exc:
                _log.warning("change feed cannot LISTEN; polling", error=str(exc))
                await self._release(conn)
                return
            conn.add_termination_listener(self._lost)
            self._conn = conn
            # Whatever committed while nobody listened is caught by the next read.
            for waiters in self._waiters.values():
                for woken in waiters:
                    woken.set()

    async def _unlisten(self) -> None:
        async with self._lock:
            conn, self._conn = self._conn, None
            if conn is None:
                return
            conn.remove_termination_listener(self._lost)
            with contextlib.suppress(*LISTENER_ERRORS):
                await conn.remove_listener(sql.NOTIFY_CHANNEL, self._notified)
            await self._release(conn)


_feeds: weakref.WeakKeyDictionary[Database, ChangeFeed] = weakref.WeakKeyDictionary()


def feed_for(db: Database) -> ChangeFeed:
    """The one change feed of this server's database."""
    feed = _feeds.get(db)
    if feed is None:
        feed = _feeds[db] = ChangeFeed(db)
    return feed


async def close_feed(db: Database) -> None:
    """Ends open watch streams with UNAVAILABLE; call before stopping the gRPC server."""
    feed = _feeds.get(db)
    if feed is not None:
        await feed.close()


async def _ensure_key_still_valid(memories: Memories, caller: Caller) -> None:
    """A stream outlives its authentication: stop serving a key revoked or expired since."""
    try:
        key = await memories.db.lookup_key(caller.key.key_id)
    except KeyStoreUnavailable as exc:  # the interceptor's error; in a servicer it is ours
        raise Unavailable(exc.args[0] if exc.args else "the database is unavailable") from exc
    now = datetime.now(UTC)
    if (
        key is None
        or (key.revoked_at is not None and key.revoked_at <= now)
        or (key.expires_at is not None and key.expires_at <= now)
    ):
        raise PermissionDenied("the key was revoked or has expired; the watch has ended")


@dataclass(frozen=True, slots=True)
class Change:
    """A change to report; with no row, the position marker that opens every stream. The
    row is a memory version, or, with ``document``, a knowledge document version."""

    seq: int
    kind: int
    row: asyncpg.Record | None
    changed_at: datetime | None
    document: bool = False


def document_kind(row: asyncpg.Record) -> int:
    """What a document event did: the version it left says put or delete; a put event
    whose transaction put no content changed the labels only."""
    if row["change"] == "delete":
        return memory_pb2.CHANGE_KIND_DOCUMENT_DELETED
    if "document.put" not in row["event_outcome"].split(","):
        return memory_pb2.CHANGE_KIND_DOCUMENT_RELABELED
    if row["version"] == 1:
        return memory_pb2.CHANGE_KIND_DOCUMENT_PUT
    return memory_pb2.CHANGE_KIND_DOCUMENT_REPLACED


def document_options(caller: Caller, req: memory_pb2.WatchMemoriesRequest) -> list[str] | None:
    """The collections whose document changes the stream carries (empty: all), or None
    when it carries none; the key must also hold knowledge:read to ask for them."""
    if not req.include_documents:
        if req.document_collections:
            raise InvalidArgument("document_collections", "needs include_documents")
        return None
    if not caller.has(Permission.KNOWLEDGE_READ.value):
        raise PermissionDenied(
            "include_documents: this key lacks knowledge:read, which document changes need; "
            "watch without include_documents, or use a key that holds it"
        )
    return check.names("document_collections", req.document_collections, limit=MAX_COLLECTIONS)


async def changes(
    memories: Memories,
    caller: Caller,
    req: memory_pb2.WatchMemoriesRequest,
    *,
    feed: ChangeFeed | None = None,
) -> AsyncGenerator[Change, None]:
    """Changes visible to ``caller`` after ``req.cursor`` (or from now), until cancelled."""
    feed = feed or feed_for(memories.db)
    cursor = memories.tokens.decode_seq(caller, "cursor", req.cursor, kind=cursors.Kind.WATCH)
    collections = document_options(caller, req)
    f = row_filter(req.filter)
    if not req.filter.statuses:
        f = dataclasses.replace(f, statuses=ALL_STATUSES)
    f = dataclasses.replace(f, hide_expired=False)
    visibility = memories.visibility(caller)

    def tx() -> contextlib.AbstractAsyncContextManager[asyncpg.Connection]:
        return memories.tx(caller, readonly=True)

    # Subscribe before reading the head so no commit falls between the two.
    async with feed.subscribe(caller.tenant_id) as woken:
        if not req.cursor:
            async with tx() as conn:
                cursor = await sql.head_seq(conn, caller.tenant_id)
        # The stream is live from here: tell the client where it stands, so that even a
        # watch that has seen no change yet can resume without a gap after a disconnect.
        yield Change(seq=cursor, kind=memory_pb2.CHANGE_KIND_UNSPECIFIED, row=None,
                     changed_at=None)  # fmt: skip
        checked = time.monotonic()
        while True:
            if feed.closing.is_set():
                raise Unavailable("the server is shutting down; reconnect with the last cursor")
            if time.monotonic() - checked >= KEY_RECHECK_SECONDS:
                await _ensure_key_still_valid(memories, caller)
                checked = time.monotonic()
            # One snapshot (a read-only transaction is repeatable read): every event up to
            # the head is in it, so a batch that is not full brings the cursor to the head.
            async with tx() as conn:
                head = await sql.head_seq(conn, caller.tenant_id)
                seqs = await sql.watch_batch(conn, visibility, cursor, head, BATCH_EVENTS)
                rows = await sql.changed_memories(conn, visibility, f, seqs) if seqs else []
                found = [
                    Change(
                        seq=row["audit_seq"],
                        kind=CHANGE_KIND.get(row["change"], memory_pb2.CHANGE_KIND_UNSPECIFIED),
                        row=row,
                        changed_at=row["changed_at"],
                    )
                    for row in rows
                ]
                if seqs and collections is not None:
                    rows = await sql.changed_documents(conn, visibility, collections, seqs)
                    found += [
                        Change(row["audit_seq"], document_kind(row), row, row["changed_at"], True)
                        for row in rows
                    ]
                    found.sort(key=lambda c: c.seq)  # stable: an event's rows keep their order
            for change in found:
                yield change
            full = len(seqs) >= BATCH_EVENTS
            cursor = seqs[-1] if full else max(cursor, head)
            if not full:
                await feed.wait(woken)
