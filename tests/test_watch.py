"""WatchMemories: pushed changes, scoped exactly like reads, resumable by cursor."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import grpc
import pytest
import structlog

from brain.server.domain import watch
from brain.server.domain.cursors import Holder, Kind, Tokens
from brain.server.storage import admin, audit
from brain.server.storage.db import Database
from brain.v1 import common_pb2, memory_pb2, memory_pb2_grpc

from .conftest import BrainServer, PgCluster, unique
from .helpers import Api

QUIET = 1.5  # seconds to wait for something that must not arrive


def seq(server: BrainServer, holder: Holder, cursor: str) -> int:
    """The audit sequence number a sealed cursor carries, opened with the server's pepper
    (a client cannot: the cursor is encrypted) for the key's tenant and principal."""
    return Tokens(server.cluster.pepper).decode_seq(holder, "cursor", cursor, kind=Kind.WATCH)


def md(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


async def save(
    channel: grpc.aio.Channel, key: str, content: str, labels: tuple[str, ...] = (), **scope: str
) -> str:
    scope.setdefault("namespace", "proj")
    response = await memory_pb2_grpc.MemoryServiceStub(channel).SaveMemory(
        memory_pb2.SaveMemoryRequest(
            scope=common_pb2.Scope(**scope),
            memory=common_pb2.MemoryDraft(content=content, labels=list(labels)),
        ),
        metadata=md(key),
    )
    return str(response.memory.id)


class Watcher:
    """A WatchMemories stream read in the background into a queue."""

    def __init__(self, call: grpc.aio.UnaryStreamCall) -> None:  # type: ignore[type-arg]
        self.call = call
        self.received: asyncio.Queue[memory_pb2.WatchMemoriesResponse] = asyncio.Queue()
        self.position: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.task = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        async for item in self.call:
            if not self.position.done():
                # The opening position marker: a cursor and nothing else.
                assert item.kind == memory_pb2.CHANGE_KIND_UNSPECIFIED, item
                assert not item.HasField("memory") and item.cursor, item
                self.position.set_result(item.cursor)
                continue
            await self.received.put(item)

    async def next(self, within: float = 30.0) -> memory_pb2.WatchMemoriesResponse:
        return await asyncio.wait_for(self.received.get(), within)

    async def nothing_within(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self.received.get(), seconds)
        except TimeoutError:
            return True
        return False


@asynccontextmanager
async def watching(
    channel: grpc.aio.Channel, key: str, cursor: str = "", **scope: str
) -> AsyncIterator[Watcher]:
    scope.setdefault("namespace", "proj")
    call = memory_pb2_grpc.MemoryServiceStub(channel).WatchMemories(
        memory_pb2.WatchMemoriesRequest(scope=common_pb2.Scope(**scope), cursor=cursor),
        metadata=md(key),
    )
    watcher = Watcher(call)
    # The position marker arrives once the stream is subscribed and knows its start.
    await asyncio.wait_for(asyncio.shield(watcher.position), 10)
    try:
        yield watcher
    finally:
        call.cancel()
        if not watcher.task.done():
            with pytest.raises(asyncio.CancelledError):
                await watcher.task


@pytest.mark.parametrize("apart", [False, True], ids=["with-settings", "apart"])
async def test_watch_delivers_allowed_change_and_never_a_foreign_one(
    brain_server: BrainServer, channel: grpc.aio.Channel, apart: bool
) -> None:
    """Another tenant's write, another user's write and a row with a label the key lacks
    never reach the watcher; its own change is pushed to it by NOTIFY (queued with the
    transaction's settings, or, as on a Citus coordinator, by a statement of its own)."""
    tenant, other_tenant = unique("t"), unique("t")
    watcher_key = brain_server.mint_key(tenant, "alice", user="alice")
    bob = brain_server.mint_key(tenant, "bob", user="bob")
    secret_keeper = brain_server.mint_key(tenant, "carol", labels=("team", "secret"))
    stranger = brain_server.mint_key(other_tenant, "alice", user="alice")

    # With the fallback poll pushed out of reach, whatever arrives was woken by NOTIFY.
    # (Latency itself is a benchmark matter.)
    assert brain_server.running is not None
    feed = watch.feed_for(brain_server.running.db)
    poll_seconds, feed.poll_seconds = feed.poll_seconds, 3600.0
    brain_server.running.db.notify_apart = apart
    try:
        async with watching(channel, watcher_key, user_id="alice") as w:
            await save(channel, stranger, "other tenant's plan", user_id="alice")
            await save(channel, bob, "bob's private note", user_id="bob")
            await save(channel, secret_keeper, "the secret", labels=("secret",))
            mine = await save(channel, watcher_key, "alice's own note", user_id="alice")
            got = await w.next()
            # The foreign writes came first; had any leaked it would be here instead.
            assert got.memory.id == mine
            assert got.kind == memory_pb2.CHANGE_KIND_CREATED
            assert got.memory.content == "alice's own note"
            assert got.cursor
            assert feed.listening  # not the quick poll a feed falls back to without LISTEN
            shared = await save(channel, secret_keeper, "team-wide note")  # user '' = team
            assert (await w.next()).memory.id == shared
            await save(channel, bob, "bob again", user_id="bob")
            assert await w.nothing_within(QUIET)
    finally:
        feed.poll_seconds = poll_seconds
        brain_server.running.db.notify_apart = False


async def test_watch_resumes_after_its_cursor(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A watcher that reconnects with its last cursor gets what it missed, in order."""
    key = brain_server.mint_key(unique("t"), "alice")
    async with watching(channel, key) as w:
        first = await save(channel, key, "first")
        got = await w.next()
        assert got.memory.id == first
        cursor = got.cursor
    missed = [await save(channel, key, f"missed {i}") for i in range(2)]
    async with watching(channel, key, cursor=cursor) as w:
        assert [(await w.next()).memory.id for _ in missed] == missed
        assert await w.nothing_within(0.5)
    # Without a cursor a watch starts from now: the past is not replayed, the present is.
    async with watching(channel, key) as w:
        assert await w.nothing_within(0.5)
        now = await save(channel, key, "now")
        assert (await w.next()).memory.id == now
        latest = await save(channel, key, "latest")
        assert (await w.next()).memory.id == latest


async def test_watch_rejects_a_cursor_it_did_not_hand_out(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A malformed cursor is INVALID_ARGUMENT naming the field; one it handed out resumes."""
    key = brain_server.mint_key(unique("t"), "alice")
    call = memory_pb2_grpc.MemoryServiceStub(channel).WatchMemories(
        memory_pb2.WatchMemoriesRequest(scope=common_pb2.Scope(namespace="proj"), cursor="x1"),
        metadata=md(key),
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in call:
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cursor" in (err.value.details() or "")
    # Positive control: the same call with a cursor the server handed out is accepted.
    async with watching(channel, key) as w:
        handed_out = await w.position
    mine = await save(channel, key, "written after the handed-out cursor")
    async with watching(channel, key, cursor=handed_out) as w:
        assert (await w.next()).memory.id == mine


def listeners(server: BrainServer) -> int:
    rows = server.sql(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %brain_audit%'"
    )
    return int(rows[0][0])


async def test_watch_survives_losing_its_listener_and_releases_it_on_cancel(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """With the LISTEN backend killed, changes still arrive (polling, then re-listen);
    when the last watcher cancels, the listening connection is let go."""
    key = brain_server.mint_key(unique("t"), "alice")
    async with watching(channel, key) as w:
        assert listeners(brain_server) == 1
        brain_server.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE query LIKE 'LISTEN %brain_audit%'"
        )
        after_kill = await save(channel, key, "written while the listener was down")
        assert (await w.next()).memory.id == after_kill
    for _ in range(300):  # the release happens just after the stream ends
        if not listeners(brain_server):
            break
        await asyncio.sleep(0.1)
    assert listeners(brain_server) == 0


async def test_watch_reports_each_lifecycle_change_with_its_kind(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Save, supersede, update and forget arrive as their change kinds, in order, with the
    memory version each change wrote (a forgotten one without content); forgetting the
    replacement reopens what it replaced as a candidate for review (issue 30)."""
    key = brain_server.mint_key(
        unique("t"), "alice", permissions="memories:read,memories:write,memories:forget"
    )
    api = Api(channel, key)
    async with watching(channel, key) as w:
        old = (await api.save("Deploys happen on Friday")).memory.id
        new = (await api.save("Deploys happen on Thursday", supersedes=[old])).memory.id
        await api.update(new, ["importance"], importance=0.9)
        await api.forget(new)
        got = [await w.next() for _ in range(6)]
        assert await w.nothing_within(0.5)
    assert [(g.memory.id, g.kind) for g in got] == [
        (old, memory_pb2.CHANGE_KIND_CREATED),
        (new, memory_pb2.CHANGE_KIND_CREATED),
        (old, memory_pb2.CHANGE_KIND_SUPERSEDED),
        (new, memory_pb2.CHANGE_KIND_UPDATED),
        (new, memory_pb2.CHANGE_KIND_FORGOTTEN),
        (old, memory_pb2.CHANGE_KIND_PROPOSED),
    ]
    assert got[5].memory.status == common_pb2.MEMORY_STATUS_CANDIDATE
    assert got[3].memory.importance == pytest.approx(0.9)
    assert got[4].memory.content == ""
    assert got[4].memory.status == common_pb2.MEMORY_STATUS_RETRACTED
    assert got[2].cursor != got[1].cursor  # sealed afresh each time, so nothing to compare
    holder = await api.whoami()
    at = [seq(brain_server, holder, g.cursor) for g in got]
    assert at[2] == at[1]  # one save, one event, two memories
    assert at[0] < at[1] < at[3] < at[4]


async def test_watch_ends_with_unavailable_when_the_server_stops(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Stopping the server ends open watch streams at once with UNAVAILABLE, and a watch
    reopened afterwards with the last cursor picks up where it left off. The stream ended
    by the drain is logged at info, not as a failed call (a warning per open stream at
    every deploy would hide real ones)."""
    key = brain_server.mint_key(unique("t"), "alice")
    before = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        with structlog.testing.capture_logs() as events:
            async with watching(channel, key) as w:
                first = await save(channel, key, "before the restart")
                cursor = (await w.next()).cursor
                restart = asyncio.create_task(brain_server.restart())
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await asyncio.wait_for(asyncio.shield(w.task), 5)
                assert err.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "cursor" in (err.value.details() or "")
                await restart
    finally:
        structlog.configure(**before)
    if brain_server.running is not None:  # in-process: its log lines are captured here
        ended = [e for e in events if e.get("method", "").endswith("/WatchMemories")]
        assert [(e["log_level"], e["status"]) for e in ended] == [("info", "UNAVAILABLE")]
    later = await save(channel, key, "after the restart")
    async with watching(channel, key, cursor=cursor) as w:
        assert (await w.next()).memory.id == later
    assert first != later


async def test_watch_ends_when_its_key_is_revoked(
    brain_server: BrainServer, channel: grpc.aio.Channel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream authenticated before a revocation stops with PERMISSION_DENIED after it."""
    monkeypatch.setattr(watch, "KEY_RECHECK_SECONDS", 0.0)
    tenant = unique("t")
    key = brain_server.mint_key(tenant, "alice")
    other = brain_server.mint_key(tenant, "bob")
    async with watching(channel, key) as w:
        mine = await save(channel, key, "still allowed")
        assert (await w.next()).memory.id == mine
        brain_server.sql(
            "UPDATE api_keys SET revoked_at = now() WHERE key_id = $1", key.split("_")[1]
        )
        # Another key's write wakes the stream at once (its poll would, seconds later): the
        # key is checked again before the stream reads anything more.
        await save(channel, other, "written after the revocation, visible to alice's key")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await asyncio.wait_for(asyncio.shield(w.task), 8)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "revoked" in (err.value.details() or "")
        assert w.received.empty()  # the write after the revocation never reached it


async def test_position_marker_lets_a_quiet_watch_resume_without_a_gap(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A watch that saw no change still resumes exactly: its opening marker carries a cursor,
    and a stream reopened with it delivers what was written in between, and nothing older."""
    key = brain_server.mint_key(unique("t"), "alice")
    before = await save(channel, key, "written before the watch")
    async with watching(channel, key) as w:
        position = await w.position
        assert await w.nothing_within(0.3)
    missed = await save(channel, key, "written while nobody watched")
    async with watching(channel, key, cursor=position) as resumed:
        got = await resumed.next()
        assert got.memory.id == missed
        assert await resumed.nothing_within(0.5)
    assert before != missed


@pytest.mark.parametrize("apart", [False, True], ids=["with-settings", "apart"])
async def test_watchers_are_woken_by_the_server_at_commit_not_by_the_audit_trigger(
    pg_cluster: PgCluster, apart: bool
) -> None:
    """Only a committed server write notifies its tenant; the audit trigger and rollbacks
    don't. Either way: the NOTIFY queued with the transaction's settings (PostgreSQL), or
    by a statement of its own (a Citus coordinator, which replays the settings' string on
    the workers, where a NOTIFY cannot be PREPAREd)."""
    owner = await asyncpg.connect(pg_cluster.owner_dsn)
    db = await Database.connect(pg_cluster.app_dsn, max_size=1)
    db.notify_apart = apart
    heard: list[str] = []
    arrived = asyncio.Event()

    def hear(conn: object, pid: int, channel: str, payload: object) -> None:
        heard.append(str(payload))
        arrived.set()

    try:
        a = await admin.create_tenant(owner, unique("notify-a"))
        b = await admin.create_tenant(owner, unique("notify-b"))
        listener = await asyncpg.connect(pg_cluster.owner_dsn)
        try:
            await listener.add_listener(audit.NOTIFY_CHANNEL, hear)
            # The trigger's function appends an event for tenant a and commits.
            await owner.fetchval(
                "SELECT brain_audit_append($1::uuid, 'k', 'p', 'm', '{}', 'test')", a
            )
            with pytest.raises(RuntimeError):
                async with db.tenant_tx(str(a)):
                    raise RuntimeError("rolled back")
            async with db.tenant_tx(str(b)):
                pass
            # Notifications arrive in commit order: had either of the first two notified,
            # it would be heard before b.
            await asyncio.wait_for(arrived.wait(), 20)
            assert heard[0] == str(b)
        finally:
            await listener.close()
    finally:
        await db.close()
        await owner.close()
