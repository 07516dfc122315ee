"""Document events on WatchMemories (issue 31): with ``include_documents`` the stream also
carries each put, new version, relabel and delete of a knowledge document the key may see,
in audit order under the same cursor, and never one it may not see.

Absence is shown by order, as in test_watch: the foreign changes are made first, so had one
leaked it would arrive before the watcher's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest

from brain.v1 import common_pb2, knowledge_pb2, memory_pb2, memory_pb2_grpc

from .conftest import BrainServer, unique
from .helpers import Api, rpc_error
from .test_knowledge import delete_call, put
from .test_watch import QUIET, Watcher, md, save

READER = "memories:read,memories:write,knowledge:read,knowledge:write,knowledge:delete"


@asynccontextmanager
async def watching_documents(
    channel: grpc.aio.Channel, key: str, *collections: str, cursor: str = "", **scope: str
) -> AsyncIterator[Watcher]:
    scope.setdefault("namespace", "proj")
    call = memory_pb2_grpc.MemoryServiceStub(channel).WatchMemories(
        memory_pb2.WatchMemoriesRequest(
            scope=common_pb2.Scope(**scope), cursor=cursor, include_documents=True,
            document_collections=list(collections),
        ),
        metadata=md(key),
    )  # fmt: skip
    watcher = Watcher(call)
    await asyncio.wait_for(asyncio.shield(watcher.position), 10)
    try:
        yield watcher
    finally:
        call.cancel()
        if not watcher.task.done():
            with pytest.raises(asyncio.CancelledError):
                await watcher.task


def api_for(channel: grpc.aio.Channel, key: str, **scope: str) -> Api:
    return Api(channel, key, namespace="proj", **scope)


async def test_document_changes_stream_in_order_with_their_kinds(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A put, a new version, a relabel and a delete each arrive with their kind and the
    document version they left (no content; path and hash blank once deleted), in audit
    order with a memory saved between them; an unchanged re-put sends nothing."""
    tenant = unique("wd")
    key = brain_server.mint_key(tenant, "w", permissions=READER, labels=("team", "ops"))
    api = api_for(channel, key)
    async with watching_documents(channel, key) as w:
        doc = (await put(api, "run.md", "# Run\n\nstep one\n")).document
        got = await w.next()
        assert got.kind == memory_pb2.CHANGE_KIND_DOCUMENT_PUT and not got.HasField("memory")
        assert (got.document.id, got.document.version, got.document.path) == (doc.id, 1, "run.md")
        assert got.document.content == "" and got.cursor and got.HasField("changed_at")
        await put(api, "run.md", "# Run\n\nstep one\n")  # unchanged: no event
        memory_id = await save(channel, key, "a memory between the document's changes")
        assert (await w.next()).memory.id == memory_id
        await put(api, "run.md", "# Run\n\nstep two\n")
        got = await w.next()
        assert got.kind == memory_pb2.CHANGE_KIND_DOCUMENT_REPLACED
        assert got.document.version == 2
        await put(api, "run.md", "# Run\n\nstep two\n", labels=["ops"])
        got = await w.next()
        assert got.kind == memory_pb2.CHANGE_KIND_DOCUMENT_RELABELED
        assert (got.document.version, list(got.document.labels)) == (2, ["ops"])
        await delete_call(api, doc.id)
        got = await w.next()
        assert got.kind == memory_pb2.CHANGE_KIND_DOCUMENT_DELETED
        assert got.document.status == knowledge_pb2.DOCUMENT_STATUS_DELETED
        assert (got.document.version, got.document.path, got.document.content_hash) == (3, "", "")
        assert await w.nothing_within(QUIET)


async def test_a_key_never_gets_the_event_of_a_document_it_cannot_see(
    walled_server: BrainServer,
) -> None:
    """Another tenant's, another user's, another label's and another collection's documents
    (put, replaced and deleted) never reach the watcher; its own document's events do, and a
    watcher holding the other label gets that document's (controls). Without
    include_documents a stream carries no document event at all. The same with the
    application's predicate off (row-level security alone)."""
    async with walled_server.channel() as channel:
        await document_event_walls(walled_server, channel)


async def document_event_walls(brain_server: BrainServer, channel: grpc.aio.Channel) -> None:
    tenant, other = unique("wd"), unique("wd")
    alice = brain_server.mint_key(tenant, "alice", permissions=READER, user="alice")
    bob = brain_server.mint_key(tenant, "bob", permissions=READER, user="bob")
    hr = brain_server.mint_key(tenant, "hr", permissions=READER, labels=("team", "hr"))
    stranger = brain_server.mint_key(other, "alice", permissions=READER, user="alice")
    as_alice = api_for(channel, alice, user_id="alice")
    async with (
        watching_documents(channel, alice, "docs", user_id="alice") as w,
        watching_documents(channel, hr) as w_hr,
        watching_documents(channel, alice, user_id="alice") as w_all,
    ):
        foreign = {}
        for api, path, labels in (
            (api_for(channel, stranger, user_id="alice"), "s.md", ["team"]),
            (api_for(channel, bob, user_id="bob"), "b.md", ["team"]),
            (api_for(channel, hr), "h.md", ["hr"]),
        ):
            doc = (await put(api, path, f"# {path}\n\nfirst\n", labels=labels)).document
            await put(api, path, f"# {path}\n\nsecond\n")
            await delete_call(api, doc.id)
            foreign[path] = doc.id
        elsewhere = (await put(as_alice, "o.md", "# O\n\nother\n", collection="other")).document
        mine = (await put(as_alice, "a.md", "# A\n\nmine\n")).document
        got = await w.next()
        assert (got.kind, got.document.id) == (memory_pb2.CHANGE_KIND_DOCUMENT_PUT, mine.id)
        assert (await w_all.next()).document.id == elsewhere.id  # all collections: it comes
        assert (await w_all.next()).document.id == mine.id
        # The unconfined hr key sees bob's documents and the hr one, never the stranger's.
        seen = [await w_hr.next() for _ in range(6)]
        assert {e.document.id for e in seen} == {foreign["b.md"], foreign["h.md"]}
        hr_kinds = [e.kind for e in seen if e.document.id == foreign["h.md"]]
        assert hr_kinds == [
            memory_pb2.CHANGE_KIND_DOCUMENT_PUT,
            memory_pb2.CHANGE_KIND_DOCUMENT_REPLACED,
            memory_pb2.CHANGE_KIND_DOCUMENT_DELETED,
        ]
        assert await w.nothing_within(QUIET)

    # Without include_documents: the memory arrives, the document put before it does not.
    call = memory_pb2_grpc.MemoryServiceStub(channel).WatchMemories(
        memory_pb2.WatchMemoriesRequest(scope=common_pb2.Scope(namespace="proj", user_id="alice")),
        metadata=md(alice),
    )
    plain = Watcher(call)
    try:
        await asyncio.wait_for(asyncio.shield(plain.position), 10)
        await put(as_alice, "late.md", "# Late\n\nnot streamed\n")
        memory_id = await save(channel, alice, "alice's note", user_id="alice")
        got = await plain.next()
        assert got.memory.id == memory_id and not got.HasField("document")
    finally:
        call.cancel()


async def test_document_events_need_knowledge_read_and_resume_from_the_cursor(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A key without knowledge:read asking for document events is PERMISSION_DENIED naming
    the permission (the same request without include_documents is served: control); a bad
    collection name is INVALID_ARGUMENT naming the field; a watcher that reconnects with its
    last cursor gets the document changes it missed, in order."""
    tenant = unique("wd")
    memories_only = brain_server.mint_key(tenant, "m", permissions="memories:read")
    key = brain_server.mint_key(tenant, "w", permissions=READER)
    api = api_for(channel, key)
    stub = memory_pb2_grpc.MemoryServiceStub(channel)

    async def first(req: memory_pb2.WatchMemoriesRequest, k: str) -> object:
        call = stub.WatchMemories(req, metadata=md(k))
        try:
            return await call.read()
        finally:
            call.cancel()

    scope = common_pb2.Scope(namespace="proj")
    denied = await rpc_error(
        first(memory_pb2.WatchMemoriesRequest(scope=scope, include_documents=True), memories_only)
    )
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "knowledge:read" in (denied.details() or "")
    marker = await first(memory_pb2.WatchMemoriesRequest(scope=scope), memories_only)
    assert isinstance(marker, memory_pb2.WatchMemoriesResponse) and marker.cursor  # control
    bad = await rpc_error(first(memory_pb2.WatchMemoriesRequest(
        scope=scope, include_documents=True, document_collections=["no spaces"]), key))  # fmt: skip
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (bad.details() or "").startswith("document_collections")

    async with watching_documents(channel, key) as w:
        doc = (await put(api, "r.md", "# R\n\none\n")).document
        cursor = (await w.next()).cursor
    await put(api, "r.md", "# R\n\ntwo\n")
    await delete_call(api, doc.id)
    async with watching_documents(channel, key, cursor=cursor) as again:
        kinds = [(await again.next()).kind for _ in range(2)]
    assert kinds == [
        memory_pb2.CHANGE_KIND_DOCUMENT_REPLACED,
        memory_pb2.CHANGE_KIND_DOCUMENT_DELETED,
    ]
