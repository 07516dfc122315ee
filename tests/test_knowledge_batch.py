"""PutDocuments (issue 31: many files per round trip): each document stored as PutDocument
stores one, in order and in its own transaction; a document refused by what is stored (a
tombstone) fails alone while the others are stored; a document refused by its arguments
refuses the whole call, naming it, and nothing is stored. Every absence is checked beside
what the same call or caller does see."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from brain.clients import BrainClient, PutDocumentsItem, Scope
from brain.clients import ingest as ingest_module
from brain.clients.errors import InvalidArgument, RateLimited
from brain.clients.ingest import ingest
from brain.server.errors import Unavailable
from brain.v1 import knowledge_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api, rpc_error
from .test_knowledge import KB, delete_call, found_paths, kb, list_docs, put

OK = knowledge_pb2.PUT_OUTCOME_CREATED


def item(path: str, content: str, **kw: object) -> PutDocumentsItem:
    """One document of a batch, as client code imports it (`brain.clients`)."""
    return PutDocumentsItem(path=path, content=content, **kw)  # type: ignore[arg-type]


async def put_many(
    api: Api, documents: list[knowledge_pb2.PutDocumentsItem], collection: str = "docs"
) -> knowledge_pb2.PutDocumentsResponse:
    return await kb(api).PutDocuments(
        knowledge_pb2.PutDocumentsRequest(
            scope=api.scope(), collection=collection, documents=documents
        ),
        metadata=api.md,
    )


async def test_each_document_is_put_in_order(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """New, changed and unchanged documents in one call get what PutDocument gives each:
    created, updated (version 2), unchanged; results in the request's order; every stored
    text is searchable."""
    api = Api(channel, brain_server.mint_key(unique("kb"), "writer", permissions=KB))
    first = await put_many(
        api,
        [
            item("a.md", "# A\n\nalpha kestrel\n"),
            item("b.md", "# B\n\nbravo heron\n"),
            item("c.py", "def gamma_osprey():\n    return 3\n"),
        ],
    )
    assert [r.put.outcome for r in first.results] == [OK, OK, OK]
    assert [r.put.document.path for r in first.results] == ["a.md", "b.md", "c.py"]
    assert all(not r.error_code for r in first.results)
    again = await put_many(
        api,
        [
            item("b.md", "# B\n\nbravo heron, moved\n"),
            item("a.md", "# A\n\nalpha kestrel\n"),
            item("d.md", "# D\n\ndelta plover\n"),
        ],
    )
    puts = [r.put for r in again.results]
    assert [(p.document.path, p.outcome, p.document.version) for p in puts] == [
        ("b.md", knowledge_pb2.PUT_OUTCOME_UPDATED, 2),
        ("a.md", knowledge_pb2.PUT_OUTCOME_UNCHANGED, 1),
        ("d.md", OK, 1),
    ]
    assert await found_paths(api, "kestrel", lexical_only=True) == {"a.md"}
    assert await found_paths(api, "osprey", lexical_only=True) == {"c.py"}
    assert await found_paths(api, "moved heron", lexical_only=True) == {"b.md"}
    assert {d.path for d in await list_docs(api, collection="docs")} == {
        "a.md", "b.md", "c.py", "d.md"
    }  # fmt: skip


async def test_a_document_refused_by_a_tombstone_fails_alone(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The content of a deleted document fails its own result (FAILED_PRECONDITION naming
    the tombstone); the documents before and after it in the call are stored."""
    api = Api(channel, brain_server.mint_key(unique("kb"), "writer", permissions=KB))
    gone = await put(api, "old.md", "# Old\n\nretired falcon procedure\n")
    await delete_call(api, gone.document.id)
    answer = await put_many(
        api,
        [
            item("one.md", "# One\n\nfirst swift\n"),
            item("back.md", "# Old\n\nretired falcon procedure\n"),
            item("two.md", "# Two\n\nsecond swift\n"),
        ],
    )
    one, back, two = answer.results
    assert back.error_code == "FAILED_PRECONDITION" and "tombstone" in back.error_message
    assert not back.HasField("put")
    assert (one.put.outcome, two.put.outcome) == (OK, OK)
    assert not one.error_code and not two.error_code
    assert {d.path for d in await list_docs(api, collection="docs")} == {"one.md", "two.md"}
    # Said so, the same call puts it back.
    readmitted = await put_many(
        api, [item("back.md", "# Old\n\nretired falcon procedure\n", readmit_tombstoned=True)]
    )
    assert readmitted.results[0].put.outcome == OK


def test_a_new_clients_first_call_answered_unavailable_is_retried(
    brain_server: BrainServer,
) -> None:
    """The server answers a new client's first call UNAVAILABLE (its database down): the
    connection is up, so the sync client retries as RetryPolicy says and the call succeeds,
    even when the channel's connectivity notices have not arrived (they come on gRPC's
    thread and lagged under load; here none arrive at all). The call is retried once:
    the injected failure was consumed, and the documents are stored (control)."""
    if brain_server.running is None or brain_server.running.knowledge is None:
        pytest.skip("replaces the in-process server's batch step")
    knowledge = brain_server.running.knowledge
    original, failures = knowledge.put_many, [Unavailable("the database is unavailable")]

    async def once_unavailable(*args: Any) -> Any:
        if failures:
            raise failures.pop()
        return await original(*args)

    key = brain_server.mint_key(unique("kb"), "writer", permissions=KB)
    with BrainClient(brain_server.target, key, scope=Scope(namespace=unique("ns"))) as client:
        client._channel.unsubscribe(client._watch.observe)  # no notices: the lagging case
        knowledge.put_many = once_unavailable  # type: ignore[method-assign]
        try:
            results = client.put_documents("docs", [item("a.md", "# A\n\nfirst call\n")])
        finally:
            del knowledge.put_many
        assert failures == [] and [r.put.outcome for r in results] == [OK]
        assert [d.path for d in client.list_documents(collection="docs")] == ["a.md"]


async def test_an_error_not_the_documents_own_fails_the_call_and_the_retry_completes_it(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The database unavailable while the second document is stored fails the whole call
    UNAVAILABLE (retried by clients), not that document's result; the first document stays
    stored and the same call again answers it UNCHANGED and stores the rest."""
    if brain_server.running is None:
        pytest.skip("replaces the in-process server's store step")
    knowledge = brain_server.running.knowledge
    assert knowledge is not None
    original = knowledge.stored
    seen = {"stores": 0}

    async def outage_at_the_second(*args: Any) -> Any:
        seen["stores"] += 1
        if seen["stores"] == 2:
            raise Unavailable("the database is unavailable; retry shortly")
        return await original(*args)

    api = Api(channel, brain_server.mint_key(unique("kb"), "writer", permissions=KB))
    documents = [item(f"{n}.md", f"# {n}\n\noutage text {n}\n") for n in range(3)]
    knowledge.stored = outage_at_the_second  # type: ignore[method-assign]
    try:
        failed = await rpc_error(put_many(api, documents))
    finally:
        del knowledge.stored
    assert failed.code() == grpc.StatusCode.UNAVAILABLE
    assert [d.path for d in await list_docs(api, collection="docs")] == ["0.md"]
    again = await put_many(api, documents)
    assert [r.put.outcome for r in again.results] == [
        knowledge_pb2.PUT_OUTCOME_UNCHANGED, OK, OK
    ]  # fmt: skip
    assert {d.path for d in await list_docs(api, collection="docs")} == {"0.md", "1.md", "2.md"}


async def test_an_invalid_document_refuses_the_call_and_stores_nothing(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """INVALID_ARGUMENT (PERMISSION_DENIED for a label the key cannot grant) names the
    document and its field, and no document of the call is stored, not even the valid ones
    before it; the same valid documents alone are stored (control)."""
    api = Api(channel, brain_server.mint_key(unique("kb"), "writer", permissions=KB))
    valid = [item("ok.md", "# Ok\n\nvalid text\n"), item("fine.md", "# Fine\n\nmore text\n")]
    invalid, denied = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED
    headings = "".join(f"# H{i}\n" for i in range(2001))
    cases = [
        ([*valid, item("", "# Empty path\n")], invalid, "documents[2].path"),
        ([*valid, item("x.md", "")], invalid, "documents[2].content"),
        ([*valid, item("ok.md", "# Again\n")], invalid, "documents[2].path: is also documents[0]"),
        ([*valid, item("x.md", "# X\n", format=99)], invalid, "documents[2].format"),
        ([*valid, item("x.md", "# X\n", labels=["hr"])], denied, "documents[2].labels"),
        ([*valid, item("x.md", headings)], invalid, "documents[2].content"),
        ([], invalid, "documents: is required"),
        ([item(f"{i}.md", "# N\n") for i in range(101)], invalid, "documents: holds 101"),
    ]
    for documents, code, says in cases:
        refused = await rpc_error(put_many(api, documents))
        assert refused.code() == code, says
        assert (refused.details() or "").startswith(says), refused.details()
    assert await list_docs(api, collection="docs") == []
    stored = await put_many(api, valid)
    assert [r.put.outcome for r in stored.results] == [OK, OK]
    assert {d.path for d in await list_docs(api, collection="docs")} == {"ok.md", "fine.md"}


async def test_a_confined_key_puts_only_in_its_scope(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A key confined to user alice cannot put a batch into bob's bucket (PERMISSION_DENIED,
    nothing stored there), and its batch in its own bucket is stored (control); bob's
    documents are not alice's to see."""
    tenant = unique("kb")
    alice = Api(
        channel, brain_server.mint_key(tenant, "alice", permissions=KB, user="alice"),
        user_id="alice",
    )  # fmt: skip
    bob = Api(
        channel, brain_server.mint_key(tenant, "bob", permissions=KB, user="bob"), user_id="bob"
    )
    into_bob = kb(alice).PutDocuments(
        knowledge_pb2.PutDocumentsRequest(
            scope=bob.scope(), collection="docs", documents=[item("x.md", "# X\n\nalice's\n")]
        ),
        metadata=alice.md,
    )
    assert (await rpc_error(into_bob)).code() == grpc.StatusCode.PERMISSION_DENIED
    mine = await put_many(alice, [item("x.md", "# X\n\nalice's own\n")])
    assert mine.results[0].put.outcome == OK
    assert [d.path for d in await list_docs(alice, collection="docs")] == ["x.md"]
    assert await list_docs(bob, collection="docs") == []
    await put_many(bob, [item("y.md", "# Y\n\nbob's own\n")])
    assert [d.path for d in await list_docs(bob, collection="docs")] == ["y.md"]
    assert [d.path for d in await list_docs(alice, collection="docs")] == ["x.md"]


def test_each_document_counts_for_the_rate_limit_and_ingest_waits_for_it(
    pg_cluster: PgCluster, loop_thread: LoopThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a burst of 4 a call of 4 documents spends the key's bucket, so another call of 4
    right after is RESOURCE_EXHAUSTED (counted per call it would pass; at 2 tokens a second
    it would pass only 2 s later, far more than a call takes on any machine); another key's
    call passes (control), and its call of 101 documents is INVALID_ARGUMENT, not
    throttled; a call of more documents than the burst still passes once the bucket is
    full, and brain ingest waits the limit out: every file stored, none failed."""
    server = BrainServer(
        cluster=pg_cluster, loop=loop_thread,
        settings=server_settings(pg_cluster, rate_limit=2.0, rate_burst=4),
    )  # fmt: skip
    server.start()
    try:
        tenant = unique("kb")

        def client(name: str) -> BrainClient:
            key = server.mint_key(tenant, name, permissions=KB)
            return BrainClient(server.target, key, scope=Scope(namespace=unique("ns")))

        with client("busy") as busy, client("calm") as calm, client("big") as big:
            four = busy.put_documents("docs", [item(f"{n}.md", f"# {n}\n") for n in range(4)])
            assert [r.put.outcome for r in four] == [OK] * 4
            with pytest.raises(RateLimited):
                busy.put_documents("docs", [item(f"late{n}.md", "# Late\n") for n in range(4)])
            assert calm.put_documents("docs", [item("x.md", "# X\n")])[0].put.outcome == OK
            # More documents than a call may carry is the caller's mistake, not throttling:
            # it costs one token (calm holds 3 of 4; 101 would have cost the whole burst).
            with pytest.raises(InvalidArgument, match="documents"):
                calm.put_documents("docs", [item(f"m{n}.md", "# M\n") for n in range(101)])
            ten = big.put_documents("docs", [item(f"{n}.md", f"# {n}\n") for n in range(10)])
            assert [r.put.outcome for r in ten] == [OK] * 10
        # The client retries an UNAVAILABLE call; the failed attempt spent the key's bucket,
        # so the retry meets the rate limit, and waits it out instead of failing.
        knowledge = server.running.knowledge if server.running else None
        assert knowledge is not None
        original, failures = knowledge.put_many, [Unavailable("the database is unavailable")]

        async def once_unavailable(*args: Any) -> Any:
            if failures:
                raise failures.pop()
            return await original(*args)

        knowledge.put_many = once_unavailable  # type: ignore[method-assign]
        try:
            with client("retried") as retried:
                four = retried.put_documents(
                    "docs", [item(f"{n}.md", f"# {n}\n") for n in range(4)], timeout=20
                )
        finally:
            del knowledge.put_many
        assert failures == [] and [r.put.outcome for r in four] == [OK] * 4
        monkeypatch.setattr(ingest_module, "BATCH_FILES", 3)
        for n in range(9):
            (tmp_path / f"f{n:02}.md").write_text(f"# File {n}\n\nrate limited {n}\n")
        with client("ingest") as writer:
            report = ingest(writer, [tmp_path], "repo", cwd=tmp_path, jobs=2)
        assert report.failed == []
        assert report.created == [f"f{n:02}.md" for n in range(9)]
    finally:
        server.stop()
