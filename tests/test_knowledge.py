"""The knowledge base (issue 18): documents versioned and scoped like memories, chunked by
structure, searched with the memories' lanes, under the same walls.

Every absence is shown beside a presence in the same test, so an empty search cannot pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc

from brain.v1 import common_pb2, knowledge_pb2, knowledge_pb2_grpc, memory_pb2

from .conftest import BrainServer, LoopThread, PgCluster, fillers_held, server_settings, unique
from .edge import RANDOM_ID, outcome
from .helpers import Api, JsonEndpoint, rpc_error, serving
from .test_retrieval import toy_vector

KB = "knowledge:read,knowledge:write,knowledge:delete"
ALL = f"memories:read,memories:write,{KB}"
RUNBOOK = """# Deploy runbook

Intro paragraph about deploys.

## Rollback

To roll back, run `deployctl rollback --to previous` and watch the canary.

## Database

The staging database listens on port 5433.
"""


def kb(api: Api) -> knowledge_pb2_grpc.KnowledgeServiceStub:
    return knowledge_pb2_grpc.KnowledgeServiceStub(api.channel)


async def put(
    api: Api, path: str, content: str, *, collection: str = "docs",
    scope: common_pb2.Scope | None = None, **kw: Any,
) -> knowledge_pb2.PutDocumentResponse:  # fmt: skip
    return await kb(api).PutDocument(
        knowledge_pb2.PutDocumentRequest(
            scope=scope or api.scope(), collection=collection, path=path, content=content, **kw
        ),
        metadata=api.md,
    )


async def search(api: Api, query: str, **kw: Any) -> knowledge_pb2.SearchKnowledgeResponse:
    return await kb(api).SearchKnowledge(
        knowledge_pb2.SearchKnowledgeRequest(scope=api.scope(), query=query, **kw),
        metadata=api.md,
    )


async def found_paths(api: Api, query: str, **kw: Any) -> set[str]:
    return {h.source.path for h in (await search(api, query, **kw)).hits}


def get_call(api: Api, document_id: str, **kw: Any) -> Any:
    return kb(api).GetDocument(
        knowledge_pb2.GetDocumentRequest(scope=api.scope(), id=document_id, **kw), metadata=api.md
    )


def delete_call(api: Api, document_id: str) -> Any:
    return kb(api).DeleteDocument(
        knowledge_pb2.DeleteDocumentRequest(scope=api.scope(), id=document_id), metadata=api.md
    )


async def list_docs(api: Api, **kw: Any) -> list[knowledge_pb2.Document]:
    out: list[knowledge_pb2.Document] = []
    token = ""
    while True:
        page = await kb(api).ListDocuments(
            knowledge_pb2.ListDocumentsRequest(scope=api.scope(), page_token=token, **kw),
            metadata=api.md,
        )
        out.extend(page.documents)
        token = page.next_page_token
        if not token:
            return out


async def test_put_versions_unchanged_and_retired_chunks(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A first put creates version 1; the same content again writes nothing and says so; new
    content writes version 2, retires version 1's chunks (search finds only the new text)
    and version 1 stays readable by number."""
    api = Api(channel, brain_server.mint_key(unique("kb"), "writer", permissions=KB))
    first = await put(api, "ops/runbook.md", RUNBOOK)
    assert first.outcome == knowledge_pb2.PUT_OUTCOME_CREATED
    doc = first.document
    assert (doc.version, doc.format, doc.status) == (
        1, knowledge_pb2.DOCUMENT_FORMAT_MARKDOWN, knowledge_pb2.DOCUMENT_STATUS_ACTIVE,
    )  # fmt: skip
    assert doc.chunk_count == 3 and len(doc.content_hash) == 64 and list(doc.labels) == ["team"]

    again = await put(api, "ops/runbook.md", RUNBOOK)
    assert again.outcome == knowledge_pb2.PUT_OUTCOME_UNCHANGED
    assert (again.document.id, again.document.version) == (doc.id, 1)
    rows = brain_server.sql("SELECT version FROM documents WHERE document_id = $1", doc.id)
    assert [r["version"] for r in rows] == [1]

    changed = RUNBOOK.replace("port 5433", "port 6543 behind pgbouncer")
    second = await put(api, "ops/runbook.md", changed)
    assert second.outcome == knowledge_pb2.PUT_OUTCOME_UPDATED
    assert (second.document.id, second.document.version) == (doc.id, 2)
    chunks = brain_server.sql(
        "SELECT version, retired_at IS NULL AS live FROM document_chunks WHERE document_id = $1",
        doc.id,
    )
    assert {(r["version"], r["live"]) for r in chunks} == {(1, False), (2, True)}
    assert "ops/runbook.md" in await found_paths(api, "pgbouncer", lexical_only=True)
    assert await found_paths(api, "5433", lexical_only=True) == set()
    old = (await get_call(api, doc.id, version=1, include_content=True)).document
    assert (old.version, old.content) == (1, RUNBOOK) and old.HasField("retired_at")
    now = (await get_call(api, doc.id)).document
    assert (now.version, now.content) == (2, "")  # content only on request
    assert [d.id for d in await list_docs(api)] == [doc.id]


async def test_search_returns_chunks_with_headings_lines_and_scores(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Markdown hits carry their heading path and lines; Python hits the definition's name;
    a query about nothing stored finds nothing."""
    api = Api(channel, brain_server.mint_key(unique("kb"), "writer", permissions=KB))
    await put(api, "ops/runbook.md", RUNBOOK)
    code = (
        'import os\n\n\ndef rotate_credentials(vault):\n    """Rotate every secret."""\n'
        "    return vault.rotate()\n"
    )
    await put(api, "tools/rotate.py", code, collection="code")
    hits = (await search(api, "how do I roll back a deploy", lexical_only=True)).hits
    assert hits and hits[0].source.path == "ops/runbook.md"
    top = hits[0]
    assert list(top.source.heading_path) == ["Deploy runbook", "Rollback"]
    assert (top.source.line_start, top.source.line_end) == (5, 7)
    assert "deployctl rollback" in top.content and top.score > 0 and top.lexical_rank == 1
    code_hits = (await search(api, "rotate credentials vault", collections=["code"])).hits
    assert code_hits[0].source.heading_path == ["rotate_credentials"]
    assert (code_hits[0].source.line_start, code_hits[0].source.line_end) == (4, 6)
    assert {h.source.collection for h in code_hits} == {"code"}
    assert (await search(api, "zyxwvut", lexical_only=True)).hits == []


async def test_a_put_keeps_every_chunks_heading_path_and_lines(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A put writes its chunks in one statement, heading paths sent as JSON: headings with
    quotes, commas, braces, a backslash and accents come back as written and in order, the
    text before the first heading with an empty path, each chunk with its own lines."""
    api = Api(channel, brain_server.mint_key(unique("kb"), "writer", permissions=KB))
    top, sub = 'Ops, "notes" {v2}', "Ünïcode \\ path [x]"
    text = f"Preamble about quokkas.\n\n# {top}\n\nWombats live here.\n\n## {sub}\n\nNumbats too.\n"
    await put(api, "odd.md", text)
    paths = {}
    for word in ("quokkas", "wombats", "numbats"):
        (hit,) = (await search(api, word, lexical_only=True)).hits
        paths[word] = (list(hit.source.heading_path), hit.source.line_start)
    assert paths == {"quokkas": ([], 1), "wombats": ([top], 3), "numbats": ([top, sub], 7)}


async def test_walls_on_search_get_list_and_delete(walled_server: BrainServer) -> None:
    """Cross-tenant, cross-user, labels, namespace and session: each key finds exactly the
    documents its scope and labels allow, on Search, List, Get and BuildContext — also
    with the application filter off (row-level security alone)."""
    tenant, other = unique("kb-a"), unique("kb-b")
    s = walled_server
    async with s.channel() as channel:
        admin = Api(
            channel,
            s.mint_key(tenant, "admin", permissions=ALL, labels=("team", "hr")),
            namespace="",
        )
        alice = Api(
            channel,
            s.mint_key(tenant, "alice", permissions=ALL, user="alice", namespaces=("eng",)),
            namespace="eng", user_id="alice",
        )  # fmt: skip
        alice_s1 = Api(
            channel,
            s.mint_key(
                tenant, "alice-s1", permissions=ALL, user="alice", namespaces=("eng",),
                session="s1",
            ),
            namespace="eng", user_id="alice", session_id="s1",
        )  # fmt: skip
        stranger = Api(channel, s.mint_key(other, "admin", permissions=ALL), namespace="eng")
        ids: dict[str, str] = {}
        for name, scope, labels in [
            ("team", common_pb2.Scope(namespace="eng"), ["team"]),
            ("alice", common_pb2.Scope(namespace="eng", user_id="alice"), ["team"]),
            ("bob", common_pb2.Scope(namespace="eng", user_id="bob"), ["team"]),
            ("hr", common_pb2.Scope(namespace="eng"), ["hr"]),
            ("ops", common_pb2.Scope(namespace="ops"), ["team"]),
            ("s1", common_pb2.Scope(namespace="eng", user_id="alice", session_id="s1"), ["team"]),
            ("s2", common_pb2.Scope(namespace="eng", user_id="alice", session_id="s2"), ["team"]),
        ]:
            done = await put(admin, f"{name}.md", f"# {name}\n\nwallflower {name} notes\n",
                             scope=scope, labels=labels)  # fmt: skip
            ids[name] = done.document.id
        foreign = await put(stranger, "team.md", "# team\n\nwallflower team notes\n")

        async def seen(api: Api) -> set[str]:
            paths = await found_paths(api, "wallflower", lexical_only=True, limit=50)
            listed = {d.path for d in await list_docs(api)}
            assert listed == paths  # List and Search agree
            return {p.removesuffix(".md") for p in paths}

        assert await seen(admin) == {"team", "alice", "bob", "hr", "ops", "s1", "s2"}
        assert await seen(alice) == {"team", "alice", "s1", "s2"}
        assert await seen(alice_s1) == {"team", "alice", "s1"}
        assert await seen(stranger) == {"team"}  # its own tenant's document only
        stranger_ids = {h.source.document_id for h in (await search(stranger, "wallflower")).hits}
        assert stranger_ids == {foreign.document.id}

        baseline = await outcome(get_call(alice, RANDOM_ID))
        assert baseline[0] == grpc.StatusCode.NOT_FOUND
        for hidden in ("bob", "hr", "ops"):
            assert await outcome(get_call(alice, ids[hidden])) == baseline, hidden
            assert await outcome(delete_call(alice, ids[hidden])) == await outcome(
                delete_call(alice, RANDOM_ID)
            ), hidden
        assert await outcome(get_call(alice_s1, ids["s2"])) == await outcome(
            get_call(alice_s1, RANDOM_ID)
        )
        assert await outcome(get_call(stranger, ids["team"])) == await outcome(
            get_call(stranger, RANDOM_ID)
        )
        assert (await get_call(alice, ids["alice"])).document.path == "alice.md"  # control
        # Write power: alice reads the team document but may not erase it; her own she may.
        denied = await rpc_error(delete_call(alice, ids["team"]))
        assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
        assert (await delete_call(alice, ids["alice"])).version == 2
        assert await seen(admin) == {"team", "bob", "hr", "ops", "s1", "s2"}


async def test_labels_follow_the_whole_document_on_a_re_put(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Relabelling a document on re-put applies to every version and chunk at once: a key
    without the new label loses it entirely (old versions too), a key holding it keeps it;
    a key cannot grant a label it does not hold."""
    tenant = unique("kb")
    wide = Api(
        channel, brain_server.mint_key(tenant, "wide", permissions=KB, labels=("team", "hr"))
    )
    narrow = Api(channel, brain_server.mint_key(tenant, "narrow", permissions=KB))
    doc = (await put(wide, "pay.md", "# Pay\n\nsalary bands v1\n")).document
    await put(wide, "pay.md", "# Pay\n\nsalary bands v2\n")
    assert (await get_call(narrow, doc.id, version=1)).document.version == 1  # control
    relabelled = await put(wide, "pay.md", "# Pay\n\nsalary bands v2\n", labels=["hr"])
    assert relabelled.outcome == knowledge_pb2.PUT_OUTCOME_UNCHANGED
    assert list(relabelled.document.labels) == ["hr"]
    for version in (1, 2):
        hidden = await outcome(get_call(narrow, doc.id, version=version))
        assert hidden == await outcome(get_call(narrow, RANDOM_ID, version=version))
    assert await found_paths(narrow, "salary", lexical_only=True) == set()
    assert await found_paths(wide, "salary", lexical_only=True) == {"pay.md"}
    err = await rpc_error(put(narrow, "x.md", "# x\n\ny\n", labels=["hr"]))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED and "labels" in (err.details() or "")


async def test_permissions_are_their_own_decision(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """knowledge:* are separate permissions: a memories-only key can neither put nor search
    documents, and its BuildContext holds only memories; with knowledge:read the same
    BuildContext mixes in the document, marked with its kind and source."""
    tenant = unique("kb")
    writer = Api(channel, brain_server.mint_key(tenant, "writer", permissions=ALL))
    memories_only = Api(channel, brain_server.mint_key(tenant, "mem"))
    reader = Api(
        channel, brain_server.mint_key(tenant, "reader", permissions="memories:read,knowledge:read")
    )
    await put(writer, "ops/runbook.md", RUNBOOK)
    await writer.save("The staging database moved to port 5433 last week")
    for call in (put(memories_only, "x.md", "x"), search(memories_only, "staging")):
        assert (await rpc_error(call)).code() == grpc.StatusCode.PERMISSION_DENIED
    read_only = await rpc_error(put(reader, "x.md", "x"))
    assert read_only.code() == grpc.StatusCode.PERMISSION_DENIED

    def context_call(api: Api, **kw: Any) -> Any:
        return api.memories.BuildContext(
            memory_pb2.BuildContextRequest(scope=api.scope(), query="staging database port", **kw),
            metadata=api.md,
        )

    plain = await context_call(memories_only)
    assert {i.kind for i in plain.items} == {memory_pb2.CONTEXT_ITEM_KIND_MEMORY}
    mixed = await context_call(reader)
    kinds = {i.kind for i in mixed.items}
    assert kinds == {memory_pb2.CONTEXT_ITEM_KIND_MEMORY, memory_pb2.CONTEXT_ITEM_KIND_KNOWLEDGE}
    chunk = next(i for i in mixed.items if i.kind == memory_pb2.CONTEXT_ITEM_KIND_KNOWLEDGE)
    assert chunk.source.path == "ops/runbook.md" and chunk.source.collection == "docs"
    assert list(chunk.source.heading_path) == ["Deploy runbook", "Database"]
    assert chunk.id == chunk.source.chunk_id and "5433" in chunk.content
    assert "docs/ops/runbook.md § Deploy runbook > Database" in mixed.context
    skipped = await context_call(reader, exclude_knowledge=True)
    assert {i.kind for i in skipped.items} == {memory_pb2.CONTEXT_ITEM_KIND_MEMORY}
    elsewhere = await context_call(reader, knowledge_collections=["other"])
    assert {i.kind for i in elsewhere.items} == {memory_pb2.CONTEXT_ITEM_KIND_MEMORY}


async def test_bad_input_names_the_field_and_writes_nothing(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Missing or malformed collection, path, content, id or format is INVALID_ARGUMENT
    naming the field; nothing is stored, and a good put afterwards works."""
    tenant = unique("kb")
    api = Api(channel, brain_server.mint_key(tenant, "w", permissions=KB))
    cases = [
        ("collection", put(api, "a.md", "x", collection="")),
        ("collection", put(api, "a.md", "x", collection="bad name!")),
        ("path", put(api, "", "x")),
        ("path", put(api, "a\nb.md", "x")),
        # Another spelling of a path, or a name that rewrites a terminal, is no path:
        *[
            ("path", put(api, bad, "x"))
            for bad in (
                "./a.md",
                "a//b.md",
                "docs/",
                "../etc/passwd",
                "/etc/passwd",
                ".",
                "..",
                "/",
                "a/./b.md",
                "C:\\x.md",
                "red\x1b[31m.md",
                "del\x7f.md",
                "line\u2028.md",
                "next\x85.md",
                "\u200b",
                "rtl\u202e.md",
            )
        ],
        ("content", put(api, "a.md", "   ")),
        ("content", put(api, "a.md", "\u200b\n\u200c")),
        ("content", put(api, "a.md", "x" * (1024 * 1024 + 1))),
        ("format", put(api, "a.md", "x", format=99)),  # type: ignore[arg-type]
        ("id", get_call(api, "not-a-uuid")),
        ("id", delete_call(api, "")),
        ("query", search(api, " ")),
        ("collections", search(api, "x", collections=["bad name!"])),
    ]
    for field, call in cases:
        err = await rpc_error(call)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert (err.details() or "").startswith(field), (field, err.details())
    assert await list_docs(api) == []
    assert (await put(api, "a.md", "# fine\n")).outcome == knowledge_pb2.PUT_OUTCOME_CREATED
    # Controls: folders, dots inside names, spaces, other scripts and a tilde are paths.
    fine = ["docs/ops/run book.md", ".github/ci.yml", "a..b.md", "~notes.md", "文档/设计.md"]
    for path in fine:
        assert (await put(api, path, "# fine\n")).outcome == knowledge_pb2.PUT_OUTCOME_CREATED
    assert sorted(d.path for d in await list_docs(api)) == sorted(["a.md", *fine])


@contextmanager
def session_filler_held(brain_server: BrainServer) -> Iterator[None]:
    """Every running in-process server's chunk-vector filler stopped for the block (the
    session server's, and a module's `walled_server` one that stays up for the module's
    later tests), so no other filler reaches a test's chunks; started again after it."""
    with fillers_held():
        yield


class SwitchableEmbeddings(JsonEndpoint):
    """An OpenAI-compatible embeddings server that fails (500) until `up` is set; up, it
    serves the toy bag-of-words vectors of test_retrieval (texts sharing words align)."""

    up = False

    def answer(self, body: Any) -> tuple[int, Any] | None:
        if not self.up:
            return 500, {"error": "down for maintenance"}
        data = [{"index": i, "embedding": toy_vector(t)} for i, t in enumerate(body["input"])]
        return 200, {"data": data, "model": body["model"]}


async def test_embedder_down_puts_lexical_search_then_backfill(
    pg_cluster: PgCluster, loop_thread: LoopThread, brain_server: BrainServer
) -> None:
    """With the embedder down a put still succeeds (chunks stored without vectors) and search
    answers from the lexical lanes, saying so; once it is back, search is hybrid and
    `brain-admin embeddings backfill` fills the chunks' vectors (the servers' background
    fillers held, see test_knowledge_filler.py for theirs)."""
    with serving(SwitchableEmbeddings()) as embeddings, session_filler_held(brain_server):
        server = BrainServer(
            cluster=pg_cluster, loop=loop_thread,
            settings=server_settings(pg_cluster, embedder="openai", openai_url=embeddings.url,
                                     openai_model="toy", embedding_dimension=384),
        )  # fmt: skip
        server.start()
        try:
            assert server.running is not None and server.running.filler is not None
            server.loop.run(server.running.filler.stop())
            tenant = unique("kb")
            async with server.channel() as channel:
                api = Api(channel, server.mint_key(tenant, "w", permissions=ALL))
                doc = await put(api, "backup.md", "# Backup\n\nThe backup job runs nightly.\n")
                assert not doc.document.fully_embedded
                down = await search(api, "nightly backup job")
                assert down.lanes == knowledge_pb2.KNOWLEDGE_LANES_LEXICAL_EMBEDDER_UNAVAILABLE
                assert [h.source.path for h in down.hits] == ["backup.md"]
                await api.save("The backup job moved to 03:00")
                asked = len(embeddings.requests)
                mixed = await api.memories.BuildContext(
                    memory_pb2.BuildContextRequest(scope=api.scope(), query="backup job"),
                    metadata=api.md,
                )
                assert len(embeddings.requests) == asked + 1  # one query embedding for both
                assert {i.kind for i in mixed.items} == {
                    memory_pb2.CONTEXT_ITEM_KIND_MEMORY, memory_pb2.CONTEXT_ITEM_KIND_KNOWLEDGE,
                }  # fmt: skip
                embeddings.up = True
                done = server.admin(
                    "embeddings", "backfill", "--tenant", tenant, "--embedder", "openai",
                    "--openai-url", embeddings.url, "--openai-model", "toy",
                    "--embedding-dimension", "384",
                )  # fmt: skip
                said = done.stdout + done.stderr
                if "1 document chunks" not in said:  # which filler took the chunk, if one did
                    tenant_id = brain_server.sql(
                        "SELECT tenant_id FROM tenants WHERE name = $1", tenant
                    )[0][0]
                    chunks = brain_server.sql(
                        "SELECT embedding_model, embed_attempts FROM document_chunks"
                        " WHERE tenant_id = $1", tenant_id,
                    )  # fmt: skip
                    raise AssertionError(f"{said!r}; the chunks then: {chunks}")
                assert (await get_call(api, doc.document.id)).document.fully_embedded
                up = await search(api, "nightly backup job")
                assert up.lanes == knowledge_pb2.KNOWLEDGE_LANES_HYBRID
                assert up.hits[0].source.path == "backup.md" and up.hits[0].semantic_rank == 1
        finally:
            server.stop()


async def test_audit_of_documents_follows_their_labels_and_tokens_are_signed(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """An auditor lists the events of the documents it can see (the team one), not those of a
    document labelled past it (hr); List pages with signed tokens and refuses a forged one."""
    from brain.v1 import audit_pb2

    tenant = unique("kb")
    writer = Api(channel, brain_server.mint_key(tenant, "w", permissions=KB, labels=("team", "hr")))
    auditor = Api(
        channel,
        brain_server.mint_key(tenant, "aud", permissions="audit:read", labels=("team",)),
    )
    team = (await put(writer, "team.md", "# t\n\nteam text\n")).document.id
    hr = (await put(writer, "hr.md", "# h\n\nhr text\n", labels=["hr"])).document.id
    events = await auditor.audit.ListAuditEvents(
        audit_pb2.ListAuditEventsRequest(scope=auditor.scope()), metadata=auditor.md
    )
    named = {i for e in events.events for i in e.memory_ids}
    assert team in named and hr not in named

    for n in range(3):
        await put(writer, f"page{n}.md", f"# p\n\npage {n}\n")
    first = await kb(writer).ListDocuments(
        knowledge_pb2.ListDocumentsRequest(scope=writer.scope(), page_size=2), metadata=writer.md
    )
    assert len(first.documents) == 2 and first.next_page_token
    assert len(await list_docs(writer)) == 5
    forged = first.next_page_token[:-2] + (
        "AA" if not first.next_page_token.endswith("AA") else "BB"
    )
    err = await rpc_error(
        kb(writer).ListDocuments(
            knowledge_pb2.ListDocumentsRequest(scope=writer.scope(), page_token=forged),
            metadata=writer.md,
        )
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.details() or "").startswith("page_token")


async def test_concurrent_puts_and_deletes_take_turns(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Identical puts racing store one document and one version; a changed put racing a
    delete of the same document either lands before it (and is erased) or after it (a new
    document) — never a server error, never a half-written version."""
    api = Api(channel, brain_server.mint_key(unique("kb"), "w", permissions=KB))
    same = await asyncio.gather(*(put(api, "race.md", "# r\n\nsame text\n") for _ in range(4)))
    assert len({r.document.id for r in same}) == 1
    assert (
        sorted(r.outcome for r in same)
        == [knowledge_pb2.PUT_OUTCOME_CREATED] + [knowledge_pb2.PUT_OUTCOME_UNCHANGED] * 3
    )
    for n in range(3):
        doc = (await put(api, f"raced{n}.md", f"# r\n\nfirst {n}\n")).document
        changed, deleted = await asyncio.gather(
            outcome(put(api, f"raced{n}.md", f"# r\n\nsecond {n}\n")),
            outcome(delete_call(api, doc.id)),
        )
        assert changed[0] == deleted[0] == grpc.StatusCode.OK
        versions = brain_server.sql(
            "SELECT version, status FROM documents WHERE document_id = $1 ORDER BY version",
            doc.id,
        )
        assert versions[-1]["status"] == "deleted"
        assert [v["version"] for v in versions] == list(range(1, len(versions) + 1))


async def test_brain_admin_mints_knowledge_keys(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """`brain-admin keys create` accepts the knowledge permissions; WhoAmI lists exactly the
    knowledge methods they open, and the key can put and search but not delete."""
    import json

    tenant = unique("kb")
    brain_server.admin("tenants", "create", tenant)
    created = json.loads(
        brain_server.admin(
            "keys", "create", "--tenant", tenant, "--principal", "ingest",
            "--permissions", "knowledge:read,knowledge:write", "--json",
        ).stdout
    )  # fmt: skip
    api = Api(channel, created["key"])
    methods = {m for m in (await api.whoami()).allowed_methods if "Knowledge" in m}
    assert methods == {
        f"/brain.v1.KnowledgeService/{m}"
        for m in ("PutDocument", "PutDocuments", "GetDocument", "ListDocuments", "SearchKnowledge")
    }
    doc = (await put(api, "a.md", "# A\n\nadmin minted\n")).document
    assert await found_paths(api, "admin minted", lexical_only=True) == {"a.md"}
    denied = await rpc_error(delete_call(api, doc.id))
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "knowledge:delete" in (denied.details() or "")
