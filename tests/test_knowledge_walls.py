"""Walls of the knowledge base (issue 18), from its security review: each test states one
rule a finding broke (or a wall the review confirmed), with a positive control beside every
absence so that an empty answer cannot pass it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from pgvector.asyncpg import register_vector

from brain.clients import BrainClient, Scope
from brain.clients.ingest import OutsideFolder, ingest
from brain.server.domain.knowledge import chunking
from brain.v1 import common_pb2, knowledge_pb2, memory_pb2

from .conftest import BrainServer, unique
from .edge import RANDOM_ID, outcome
from .helpers import Api, rpc_error
from .test_knowledge import ALL, KB, delete_call, get_call, list_docs, put, session_filler_held

# --- F1: `brain ingest --prune` erases documents of other buckets ------------------------


def test_ingest_prune_leaves_the_teams_documents_to_a_user_scoped_ingest(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """`brain ingest docs --prune` as alice (scope user alice) prunes only her bucket: the
    listing also shows the team's documents (user_id ''), which ingest never writes and so
    must never erase."""
    tenant = unique("atk-ing")
    admin = brain_server.mint_key(tenant, "admin", permissions=KB)
    # A key not confined to a user (e.g. a CI key) ingesting with BRAIN_USER_ID=alice.
    ci = brain_server.mint_key(tenant, "ci", permissions=KB)
    with BrainClient(brain_server.target, admin, scope=Scope(namespace="proj")) as team:
        team_doc = team.put_document("repo", "docs/team-runbook.md", "# Team\n\nteam only\n")
    with BrainClient(brain_server.target, admin, scope=Scope(namespace="proj", user_id="bob")) as b:
        bob_doc = b.put_document("repo", "docs/bob-notes.md", "# Bob\n\nbob private\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "alice.md").write_text("# Alice\n\nalice file\n")
    with BrainClient(
        brain_server.target, ci, scope=Scope(namespace="proj", user_id="alice")
    ) as alice:
        report = ingest(alice, [tmp_path / "docs"], "repo", prune=True, cwd=tmp_path)
        assert report.created == ["docs/alice.md"]  # control: her file is stored
    with BrainClient(brain_server.target, admin, scope=Scope(namespace="proj")) as team:
        team_now = team.get_document(team_doc.document.id).document
        bob_now = team.get_document(bob_doc.document.id).document
    # Bob's document is outside alice's scope: untouched (control of the scope rule).
    assert bob_now.status == knowledge_pb2.DOCUMENT_STATUS_ACTIVE
    # The team's document is not in the bucket ingest writes to: prune must leave it.
    assert report.deleted == [], report.deleted
    assert team_now.status == knowledge_pb2.DOCUMENT_STATUS_ACTIVE


def test_ingest_prune_without_user_scope_leaves_every_users_documents(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """With no user in scope (key not confined to a user) the listing spans every user's
    documents of the namespace; prune still erases only the team bucket's own."""
    tenant = unique("atk-ing2")
    admin = brain_server.mint_key(tenant, "admin", permissions=KB)
    with BrainClient(brain_server.target, admin, scope=Scope(namespace="proj", user_id="bob")) as b:
        bob_doc = b.put_document("repo", "docs/bob-notes.md", "# Bob\n\nbob private\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "team.md").write_text("# Team\n\nteam file\n")
    with BrainClient(brain_server.target, admin, scope=Scope(namespace="proj")) as team:
        report = ingest(team, [tmp_path / "docs"], "repo", prune=True, cwd=tmp_path)
        assert report.created == ["docs/team.md"]  # control
        bob_now = team.get_document(bob_doc.document.id).document
    assert report.deleted == [], report.deleted
    assert bob_now.status == knowledge_pb2.DOCUMENT_STATUS_ACTIVE


def test_confined_key_ingests_and_prunes_its_bucket_without_failing_on_team_documents(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """A key confined to alice sees the team's documents but may not delete them: its
    prune skips them (no failure, exit 0) and erases its own gone file (the control)."""
    tenant = unique("atk-ing3")
    admin = brain_server.mint_key(tenant, "admin", permissions=KB)
    alice_key = brain_server.mint_key(tenant, "alice", permissions=KB, user="alice")
    with BrainClient(brain_server.target, admin, scope=Scope(namespace="proj")) as team:
        team_doc = team.put_document("repo", "docs/team-runbook.md", "# Team\n\nteam only\n")
    (tmp_path / "docs").mkdir()
    gone = tmp_path / "docs" / "old.md"
    gone.write_text("# Old\n\nold file\n")
    (tmp_path / "docs" / "kept.md").write_text("# Kept\n\nkept file\n")
    scope = Scope(namespace="proj", user_id="alice")
    with BrainClient(brain_server.target, alice_key, scope=scope) as alice:
        first = ingest(alice, [tmp_path / "docs"], "repo", prune=True, cwd=tmp_path)
        assert first.created == ["docs/kept.md", "docs/old.md"] and first.failed == []
        gone.unlink()
        second = ingest(alice, [tmp_path / "docs"], "repo", prune=True, cwd=tmp_path)
    assert second.deleted == ["docs/old.md"]  # control: its own gone file is pruned
    assert second.failed == [] and second.unchanged == ["docs/kept.md"]
    with BrainClient(brain_server.target, admin, scope=Scope(namespace="proj")) as team:
        assert team.get_document(team_doc.document.id).document.status == (
            knowledge_pb2.DOCUMENT_STATUS_ACTIVE
        )


def test_ingest_refuses_paths_outside_the_current_folder(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """Documents are named relative to the current folder; a PATH outside it is refused
    before anything is sent, so no local absolute path reaches the team's brain."""
    key = brain_server.mint_key(unique("atk-abs"), "ci", permissions=KB)
    (tmp_path / "inside").mkdir()
    (tmp_path / "inside" / "a.md").write_text("# A\n\ninside\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "b.md").write_text("# B\n\noutside\n")
    with BrainClient(brain_server.target, key, scope=Scope(namespace="proj")) as client:
        with pytest.raises(OutsideFolder, match="outside the current folder"):
            ingest(client, [tmp_path / "outside"], "repo", cwd=tmp_path / "inside")
        assert list(client.list_documents()) == []
        done = ingest(client, [tmp_path / "inside"], "repo", cwd=tmp_path)  # control
        assert done.created == ["inside/a.md"]
        assert [d.path for d in client.list_documents()] == ["inside/a.md"]


# --- F2: embeddings backfill writes the vector of erased text back ------------------------


async def test_backfill_racing_a_delete_stores_no_vector_on_the_erased_chunk(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """`brain-admin embeddings backfill` reads a chunk's text and embeds it; a DeleteDocument
    that lands meanwhile erases the chunk, and the backfill's write, which re-checks that
    the chunk is current and not erased, then stores nothing."""
    tenant = unique("atk-bf")
    api = Api(channel, brain_server.mint_key(tenant, "w", permissions=KB))
    with session_filler_held(brain_server):  # no background filler races this backfill
        await backfill_racing_a_delete(brain_server, api, tenant)


async def backfill_racing_a_delete(brain_server: BrainServer, api: Api, tenant: str) -> None:
    from brain.server.admin.embeddings import _backfill_chunks, _tenant_clause

    doc = (await put(api, "secret.md", "# S\n\nthe launch code is 0000\n")).document
    # No filler runs: the chunk waits without a vector, as after an embedder outage.

    class DeletingEmbedder:
        dimension = 384

        async def embed(self, texts: list[str]) -> list[list[float]]:
            assert any("launch code" in t for t in texts)  # control: it read the text
            assert (await delete_call(api, doc.id)).version == 2  # erased meanwhile
            return [[1.0] + [0.0] * 383 for _ in texts]

    conn = await asyncpg.connect(brain_server.cluster.owner_dsn)
    try:
        await register_vector(conn)
        where, args = await _tenant_clause(conn, tenant)
        await _backfill_chunks(conn, DeletingEmbedder(), "fake", where, args, 10)  # type: ignore[arg-type]
    finally:
        await conn.close()
    rows = brain_server.sql(
        "SELECT content, embedding IS NOT NULL AS has_vector FROM document_chunks "
        "WHERE document_id = $1",
        doc.id,
    )
    assert rows and all(r["content"] == "" for r in rows)  # erased (control)
    assert not any(r["has_vector"] for r in rows), "erased chunk carries its text's vector"


async def test_backfill_racing_a_forget_stores_no_vector_on_the_erased_memory(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The same race for memories: a ForgetMemory that lands while the backfill embeds the
    memory's text leaves the retracted memory without a vector; another memory of the batch
    gets its vector (control)."""
    from brain.server.admin.embeddings import _backfill_memories, _tenant_clause

    tenant = unique("atk-bfm")
    api = Api(
        channel,
        brain_server.mint_key(
            tenant, "w", permissions="memories:read,memories:write,memories:forget"
        ),
    )
    gone = (await api.save("the vault code is 4321")).memory
    kept = (await api.save("the lobby opens at nine")).memory
    brain_server.sql(
        "UPDATE memories SET embedding = NULL WHERE memory_id = ANY($1::uuid[])",
        [gone.id, kept.id],
    )

    class ForgettingEmbedder:
        dimension = 384

        async def embed(self, texts: list[str]) -> list[list[float]]:
            assert any("vault code" in t for t in texts)  # control: it read the text
            await api.forget(gone.id)  # erased meanwhile
            return [[1.0] + [0.0] * 383 for _ in texts]

    conn = await asyncpg.connect(brain_server.cluster.owner_dsn)
    try:
        await register_vector(conn)
        where, args = await _tenant_clause(conn, tenant)
        await _backfill_memories(conn, ForgettingEmbedder(), "fake", where, args, 10)  # type: ignore[arg-type]
    finally:
        await conn.close()
    rows = brain_server.sql(
        "SELECT memory_id::text AS id, content, embedding IS NOT NULL AS has_vector"
        " FROM memories WHERE memory_id = ANY($1::uuid[])",
        [gone.id, kept.id],
    )
    by_id = {r["id"]: r for r in rows}
    assert all(r["content"] == "" and not r["has_vector"] for r in rows if r["id"] == gone.id)
    assert by_id[kept.id]["has_vector"]  # control: the live memory got its vector


# --- F3: a write-only key learns about documents it cannot read --------------------------


async def test_write_only_key_gets_no_content_oracle_and_no_others_metadata(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A key with knowledge:write but not knowledge:read, putting the exact text of the
    team's document at its path, writes a new version (never UNCHANGED, as a memory save
    by a key without memories:read is never deduplicated) and gets a receipt without the
    creator or the labels; a reader's same put is UNCHANGED (the control)."""
    tenant = unique("atk-wo")
    owner = Api(
        channel, brain_server.mint_key(tenant, "owner", permissions=ALL, labels=("team", "hr"))
    )
    writer = Api(channel, brain_server.mint_key(tenant, "agent", permissions="knowledge:write"))
    secret = "# Pay\n\nThe CFO's salary is 412000.\n"
    stored = (await put(owner, "pay.md", secret, labels=["team", "hr"])).document
    # control: the writer cannot read it
    denied = await rpc_error(get_call(writer, stored.id))
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    guess = await put(writer, "pay.md", secret)
    leaked = {
        "outcome": knowledge_pb2.PutOutcome.Name(guess.outcome),
        "id": guess.document.id == stored.id,
        "created_by": guess.document.created_by,
        "labels": list(guess.document.labels),
    }
    assert guess.outcome == knowledge_pb2.PUT_OUTCOME_UPDATED, leaked
    assert (guess.document.id, guess.document.version) == (stored.id, 2)
    assert guess.document.created_by == "" and list(guess.document.labels) == [], leaked
    again = await put(writer, "pay.md", secret)  # the same guess again: still a new version
    assert (again.outcome, again.document.version) == (knowledge_pb2.PUT_OUTCOME_UPDATED, 3)
    now = (await get_call(owner, stored.id)).document
    assert (now.version, now.created_by, list(now.labels)) == (3, "owner", ["hr", "team"])
    same = await put(owner, "pay.md", secret)  # control: a reader's dedupe still works
    assert (same.outcome, same.document.version) == (knowledge_pb2.PUT_OUTCOME_UNCHANGED, 3)


# --- F4: confined keys and write scope on PutDocument (controls) -------------------------


async def test_confined_key_cannot_put_outside_its_confinement(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Control: a key confined to user alice cannot put into the team bucket or bob's."""
    tenant = unique("atk-conf")
    alice = Api(
        channel,
        brain_server.mint_key(tenant, "alice", permissions=KB, user="alice", namespaces=("eng",)),
        namespace="eng", user_id="alice",
    )  # fmt: skip
    for scope in (
        common_pb2.Scope(namespace="eng"),
        common_pb2.Scope(namespace="eng", user_id="bob"),
    ):
        err = await rpc_error(put(alice, "x.md", "# x\n\ny\n", scope=scope))
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert (await put(alice, "x.md", "# x\n\ny\n")).document.scope.user_id == "alice"


# --- F5: a delete-only key tells hidden-by-permission from missing ------------------------


async def test_delete_only_confined_key_cannot_tell_team_documents_from_missing(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A key with knowledge:delete but not knowledge:read, confined to alice, gets for a
    team document it may not change the NOT_FOUND of a random id (PERMISSION_DENIED would
    confirm the id, which it cannot read), erases nothing, and deletes its own (control)."""
    tenant = unique("atk-del")
    owner = Api(channel, brain_server.mint_key(tenant, "owner", permissions=ALL), namespace="eng")
    deleter = Api(
        channel,
        brain_server.mint_key(
            tenant, "del", permissions="knowledge:delete", user="alice", namespaces=("eng",)
        ),
        namespace="eng", user_id="alice",
    )  # fmt: skip
    team_doc = (await put(owner, "team.md", "# t\n\nteam\n")).document
    mine = (await put(owner, "mine.md", "# m\n\nalice\n", scope=deleter.scope())).document
    assert await outcome(delete_call(deleter, team_doc.id)) == await outcome(
        delete_call(deleter, RANDOM_ID)
    )
    assert (await get_call(owner, team_doc.id)).document.status == (
        knowledge_pb2.DOCUMENT_STATUS_ACTIVE
    )
    assert (await delete_call(deleter, mine.id)).version == 2  # control


# --- F6: bad input -----------------------------------------------------------------------


async def test_pathological_documents_are_stored_or_invalid_argument(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Deeply nested Markdown / Python, odd line breaks, a heading bomb and too many lines
    (all under the 1 MiB limit; sizes kept small where they are stored, since every chunk
    is embedded) are stored, or refused with INVALID_ARGUMENT naming `content` and the
    limit; never INTERNAL, and nothing refused is half-written."""
    api = Api(channel, brain_server.mint_key(unique("atk-bad"), "w", permissions=KB))
    cases = {
        "nest.md": "> " * 5000 + "deep\n",
        "list.md": "".join("  " * i + "- x\n" for i in range(100)),
        "deep.py": "x = " + "(" * 5000 + ")" * 5000 + "\n",
        "long.py": "x = " + "+".join(["a"] * 4000) + "\n",
        "breaks.md": "# A\u2028b\x85c\x0bd\n\n## B\rtext\x1cmore\n",
        "brackets.md": "[" * 5000 + "\n",
        "headings.md": "# h\n" * 100_000,
        "lines.txt": "x\n" * 200_000,
    }
    results: dict[str, Any] = {}
    # The stored ones are about 120 chunks of a full model window each: deleted at the end,
    # before any filler spends seconds embedding them for nothing.
    with session_filler_held(brain_server):
        for name, text in cases.items():
            try:
                done = await put(api, name, text)
                results[name] = knowledge_pb2.PutOutcome.Name(done.outcome)
            except grpc.aio.AioRpcError as exc:
                results[name] = (exc.code(), (exc.details() or "")[:80])
        stored = await list_docs(api)
        for document in stored:
            await delete_call(api, document.id)
    refused = {k for k, v in results.items() if isinstance(v, tuple)}
    assert refused == {"headings.md", "lines.txt"}, results
    assert all(
        results[k][0] == grpc.StatusCode.INVALID_ARGUMENT and results[k][1].startswith("content")
        for k in refused
    ), results
    assert "heading" in results["headings.md"][1] and "lines" in results["lines.txt"][1]
    assert {d.path for d in stored} == set(cases) - refused  # nothing half-written


# --- F7: BuildContext knowledge walls ------------------------------------------------------


async def test_build_context_chunks_follow_scope_and_labels(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Control: a confined key's BuildContext holds chunks of its scope only."""
    tenant = unique("atk-bc")
    owner = Api(
        channel, brain_server.mint_key(tenant, "owner", permissions=ALL, labels=("team", "hr")),
        namespace="eng",
    )  # fmt: skip
    alice = Api(
        channel,
        brain_server.mint_key(tenant, "alice", permissions=ALL, user="alice", namespaces=("eng",)),
        namespace="eng", user_id="alice",
    )  # fmt: skip
    for name, scope, labels in [
        ("team", common_pb2.Scope(namespace="eng"), ["team"]),
        ("bob", common_pb2.Scope(namespace="eng", user_id="bob"), ["team"]),
        ("hr", common_pb2.Scope(namespace="eng"), ["hr"]),
    ]:
        await put(owner, f"{name}.md", f"# {name}\n\nquokka {name}\n", scope=scope, labels=labels)
    ctx = await alice.memories.BuildContext(
        memory_pb2.BuildContextRequest(scope=alice.scope(), query="quokka"), metadata=alice.md
    )
    paths = {i.source.path for i in ctx.items if i.kind == memory_pb2.CONTEXT_ITEM_KIND_KNOWLEDGE}
    assert paths == {"team.md"}
    assert "bob" not in ctx.context and "quokka hr" not in ctx.context
    assert {d.path for d in await list_docs(alice)} == {"team.md"}


# --- F8: erasure leaves no copy of the text in any table ----------------------------------


async def test_delete_leaves_no_trace_of_text_path_or_headings_anywhere(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """After DeleteDocument, no row of any table (cast to text: every column, tsvectors
    included) holds the document's words, path or headings, in any version."""
    api = Api(channel, brain_server.mint_key(unique("atk-er"), "w", permissions=ALL))
    v1 = "# Zanzibarheading\n\nplutonium quixotically v1\n"
    doc = (await put(api, "secretfolder/xylophone.md", v1)).document
    await put(api, "secretfolder/xylophone.md", v1 + "\n## Second\n\nmarmalade v2\n")
    words = ["zanzibar", "plutonium", "quixotic", "xylophone", "secretfolder", "marmalade"]
    tables = [
        r["relname"]
        for r in brain_server.sql(
            "SELECT relname FROM pg_class"
            " WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace"
        )
    ]

    def traces() -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for t in tables:
            rows = brain_server.sql(f'SELECT x::text AS t FROM "{t}" x')
            hits = [w for w in words if any(w in r["t"].lower() for r in rows)]
            if hits:
                found[t] = hits
        return found

    before = traces()
    assert "document_chunks" in before and "documents" in before  # control
    await delete_call(api, doc.id)
    assert traces() == {}


# --- F9: review-required namespaces and documents ------------------------------------------


async def test_review_required_namespace_takes_documents_from_reviewers_only(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Documents have no candidates: in a review-required namespace a put by a key without
    memories:review is refused with FAILED_PRECONDITION naming the namespace and the rule
    (writing nothing), while a reviewer's put reaches a teammate's BuildContext (control);
    delete stays erasure, open to the non-reviewer, as forget is for memories."""
    tenant = unique("atk-rv")
    agent = Api(channel, brain_server.mint_key(tenant, "agent", permissions=ALL))
    reviewer = Api(
        channel, brain_server.mint_key(tenant, "rev", permissions=f"{ALL},memories:review")
    )
    mate = Api(
        channel,
        brain_server.mint_key(tenant, "mate", permissions="memories:read,knowledge:read"),
    )
    earlier = (await put(agent, "old.md", "# Old\n\nwombat history\n")).document
    brain_server.admin("namespaces", "set", "proj", "--tenant", tenant, "--review-required")
    saved = await agent.save("wombat deploys are frozen")
    assert saved.outcome == memory_pb2.SAVE_OUTCOME_PROPOSED  # memories are reviewed
    err = await rpc_error(put(agent, "wombat.md", "# Wombat\n\nwombat deploys are frozen\n"))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "proj" in err.details() and "review-required" in err.details()
    assert "memories:review" in err.details()
    assert {d.path for d in await list_docs(mate)} == {"old.md"}  # nothing written
    await put(reviewer, "koala.md", "# Koala\n\nkoala deploys are frozen\n")
    ctx = await mate.memories.BuildContext(
        memory_pb2.BuildContextRequest(scope=mate.scope(), query="deploys frozen"),
        metadata=mate.md,
    )
    paths = {i.source.path for i in ctx.items if i.kind == memory_pb2.CONTEXT_ITEM_KIND_KNOWLEDGE}
    assert paths == {"koala.md"}
    assert (await delete_call(agent, earlier.id)).version == 2  # erasure is not gated


# --- F10: tokens of other lists ---------------------------------------------------------------


async def test_list_documents_refuses_other_lists_tokens(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    api = Api(channel, brain_server.mint_key(unique("atk-tok"), "w", permissions=ALL))
    for n in range(3):
        await api.save(f"memory {n}")
    page = await api.memories.ListMemories(
        memory_pb2.ListMemoriesRequest(scope=api.scope(), page_size=1), metadata=api.md
    )
    assert page.next_page_token
    from brain.v1 import knowledge_pb2_grpc

    res = await outcome(
        knowledge_pb2_grpc.KnowledgeServiceStub(channel).ListDocuments(
            knowledge_pb2.ListDocumentsRequest(scope=api.scope(), page_token=page.next_page_token),
            metadata=api.md,
        )
    )
    assert res[0] == grpc.StatusCode.INVALID_ARGUMENT, res


# --- F11: bad input across the new RPCs -----------------------------------------------------


async def test_bad_input_on_every_new_field_is_invalid_argument_naming_it(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    from brain.v1 import knowledge_pb2_grpc

    api = Api(channel, brain_server.mint_key(unique("atk-in"), "w", permissions=ALL))
    stub = knowledge_pb2_grpc.KnowledgeServiceStub(channel)
    s = api.scope()
    md = api.md
    cases: list[tuple[str, Any]] = [
        (
            "version",
            stub.GetDocument(
                knowledge_pb2.GetDocumentRequest(scope=s, id=RANDOM_ID, version=-1), metadata=md
            ),
        ),
        (
            "collection",
            stub.ListDocuments(
                knowledge_pb2.ListDocumentsRequest(scope=s, collection="bad name!"), metadata=md
            ),
        ),
        (
            "page_size",
            stub.ListDocuments(
                knowledge_pb2.ListDocumentsRequest(scope=s, page_size=-1), metadata=md
            ),
        ),
        (
            "page_size",
            stub.ListDocuments(
                knowledge_pb2.ListDocumentsRequest(scope=s, page_size=101), metadata=md
            ),
        ),
        (
            "page_token",
            stub.ListDocuments(
                knowledge_pb2.ListDocumentsRequest(scope=s, page_token="garbage"), metadata=md
            ),
        ),
        (
            "limit",
            stub.SearchKnowledge(
                knowledge_pb2.SearchKnowledgeRequest(scope=s, query="x", limit=1000), metadata=md
            ),
        ),
        (
            "limit",
            stub.SearchKnowledge(
                knowledge_pb2.SearchKnowledgeRequest(scope=s, query="x", limit=-5), metadata=md
            ),
        ),
        (
            "collections",
            stub.SearchKnowledge(
                knowledge_pb2.SearchKnowledgeRequest(
                    scope=s, query="x", collections=[f"c{i}" for i in range(17)]
                ),
                metadata=md,
            ),
        ),
        ("path", put(api, "p" * 513, "# x\n")),
        ("labels", put(api, "a.md", "# x\n", labels=["bad label!"])),
        ("format", put(api, "a.md", "# x\n", format=-1)),  # type: ignore[arg-type]
        ("scope.namespace", put(api, "a.md", "# x\n", scope=common_pb2.Scope())),
        ("content", put(api, "a.md", "a\x00b")),
        ("path", put(api, "a\x00.md", "x")),
        (
            "knowledge_collections",
            api.memories.BuildContext(
                memory_pb2.BuildContextRequest(
                    scope=s, query="x", knowledge_collections=["bad name!"]
                ),
                metadata=md,
            ),
        ),
        (
            "query",
            stub.SearchKnowledge(
                knowledge_pb2.SearchKnowledgeRequest(scope=s, query="x" * 100000), metadata=md
            ),
        ),
    ]
    bad: dict[str, Any] = {}
    for field, call in cases:
        code, details, _ = await outcome(call)
        if code != grpc.StatusCode.INVALID_ARGUMENT or not details.startswith(field):
            bad[field] = (code, details[:100])
    assert bad == {}
    assert await list_docs(api) == []


# --- F12: controls: session write scope, audit of documents for confined auditors ----------


async def test_session_key_write_scope_and_confined_audit(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    from brain.v1 import audit_pb2

    tenant = unique("atk-ses")
    owner = Api(channel, brain_server.mint_key(tenant, "owner", permissions=ALL), namespace="eng")
    s1 = Api(
        channel,
        brain_server.mint_key(
            tenant, "s1", permissions=f"{ALL},audit:read", user="alice", namespaces=("eng",),
            session="s1",
        ),
        namespace="eng", user_id="alice", session_id="s1",
    )  # fmt: skip
    ids = {}
    for name, scope in [
        ("user", common_pb2.Scope(namespace="eng", user_id="alice")),
        ("s2", common_pb2.Scope(namespace="eng", user_id="alice", session_id="s2")),
        ("bob", common_pb2.Scope(namespace="eng", user_id="bob")),
        ("mine", common_pb2.Scope(namespace="eng", user_id="alice", session_id="s1")),
    ]:
        ids[name] = (
            await put(owner, f"{name}.md", f"# {name}\n\nx {name}\n", scope=scope)
        ).document.id
    assert (
        await rpc_error(delete_call(s1, ids["user"]))
    ).code() == grpc.StatusCode.PERMISSION_DENIED
    for hidden in ("s2", "bob"):
        assert await outcome(delete_call(s1, ids[hidden])) == await outcome(
            delete_call(s1, RANDOM_ID)
        )
    assert (await delete_call(s1, ids["mine"])).version == 2  # control
    events = await s1.audit.ListAuditEvents(
        audit_pb2.ListAuditEventsRequest(scope=s1.scope()), metadata=s1.md
    )
    named = {i for e in events.events for i in e.memory_ids}
    assert ids["mine"] in named and ids["user"] in named  # control
    assert ids["s2"] not in named and ids["bob"] not in named


# --- F13: `brain ingest --labels` relabels existing documents (widening) -------------------


def test_ingest_labels_apply_to_new_documents_only(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """README: `--labels a,b` gives *new* documents those labels. But ingest passes them on
    every put, and a re-put with labels relabels every version: a document an admin
    restricted to `hr` becomes readable by the whole team when its file next changes."""
    tenant = unique("atk-lab")
    ci = brain_server.mint_key(tenant, "ci", permissions=KB, labels=("team", "hr"))
    team_reader = brain_server.mint_key(tenant, "reader", permissions="knowledge:read")
    (tmp_path / "docs").mkdir()
    f = tmp_path / "docs" / "salaries.md"
    f.write_text("# Salaries\n\nbands v1\n")
    with BrainClient(brain_server.target, ci, scope=Scope(namespace="proj")) as client:
        first = ingest(client, [tmp_path / "docs"], "repo", labels=["team"], cwd=tmp_path)
        assert first.created == ["docs/salaries.md"]
        doc_id = next(iter(client.list_documents(collection="repo"))).id
        # An admin restricts the document to hr (re-put of the same text with labels).
        text = f.read_text()
        restricted = client.put_document("repo", "docs/salaries.md", text, labels=["hr"])
        assert list(restricted.document.labels) == ["hr"]
    with BrainClient(brain_server.target, team_reader, scope=Scope(namespace="proj")) as r:
        assert list(r.list_documents()) == []  # control: hidden from the team now
    f.write_text("# Salaries\n\nbands v2: CFO 412000\n")
    with BrainClient(brain_server.target, ci, scope=Scope(namespace="proj")) as client:
        second = ingest(client, [tmp_path / "docs"], "repo", labels=["team"], cwd=tmp_path)
        assert second.updated == ["docs/salaries.md"]
    with BrainClient(brain_server.target, team_reader, scope=Scope(namespace="proj")) as r:
        leaked = [d.path for d in r.list_documents()]
    assert leaked == [], f"hr-restricted document {doc_id} now readable by the team: {leaked}"


# --- F14: one put stalls every tenant (chunking runs on the server's event loop) ------------


async def test_chunking_runs_beside_the_event_loop(
    brain_server: BrainServer, channel: grpc.aio.Channel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one tenant's put is being chunked (held here until the other call is answered),
    another tenant's call is served: chunking never runs on the server's event loop. Were it
    on the loop, the victim's call could not complete until the gate's deadlock breaker
    fired, and the gate would report that."""
    if brain_server.running is None:
        pytest.skip("needs the in-process server")
    attacker = Api(channel, brain_server.mint_key(unique("atk-dos"), "a", permissions=KB))
    victim = Api(channel, brain_server.mint_key(unique("atk-vic"), "v", permissions=KB))
    entered, answered = threading.Event(), threading.Event()
    released_by: list[str] = []
    real_chunk = chunking.chunk

    def gated_chunk(text: str, fmt: str, **options: Any) -> list[chunking.Chunk]:
        entered.set()
        released_by.append("victim" if answered.wait(timeout=15) else "deadlock breaker")
        return real_chunk(text, fmt, **options)

    monkeypatch.setattr(chunking, "chunk", gated_chunk)
    put_task = asyncio.ensure_future(put(attacker, "h.md", "# h\n\nbody\n"))
    assert await asyncio.to_thread(entered.wait, 15)  # the put is being chunked
    await victim.whoami()
    answered.set()
    assert (await put_task).outcome == knowledge_pb2.PUT_OUTCOME_CREATED  # control
    assert released_by == ["victim"]


async def test_labels_in_another_order_are_no_relabel(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A re-put naming the document's labels in another order changes nothing (labels are a
    set): no relabel event, labels as they were; naming another set relabels (control)."""
    tenant = unique("atk-ord")
    api = Api(channel, brain_server.mint_key(tenant, "w", permissions=KB, labels=("team", "hr")))
    text = "# Pay\n\nbands\n"
    doc = (await put(api, "pay.md", text, labels=["team", "hr"])).document

    def relabels() -> int:
        rows = brain_server.sql(
            "SELECT count(*) AS n FROM audit_events"
            " WHERE outcome LIKE '%document.relabel%' AND $1::uuid = ANY(memory_ids)",
            doc.id,
        )
        return int(rows[0]["n"])

    again = await put(api, "pay.md", text, labels=["hr", "team"])
    assert again.outcome == knowledge_pb2.PUT_OUTCOME_UNCHANGED
    assert sorted(again.document.labels) == ["hr", "team"] and relabels() == 0
    narrowed = await put(api, "pay.md", text, labels=["hr"])
    assert list(narrowed.document.labels) == ["hr"] and relabels() == 1
