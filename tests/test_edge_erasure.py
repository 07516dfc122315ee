"""Issue 11, class 3: forgetting reaches every copy.

After a forget, no table and no column of the database holds the forgotten text, tag,
metadata value or the reasons given when it was proposed and reviewed — audit events and
idempotency records included — and a replayed request answers with the retracted memory.
Each search is shown to find the same values before the forget.
"""

from __future__ import annotations

import secrets

import asyncpg
import grpc

from brain.v1 import audit_pb2, common_pb2, knowledge_pb2, memory_pb2

from .conftest import BrainServer, unique
from .edge import RANDOM_ID, get_call, outcome
from .helpers import Api
from .test_knowledge import KB, delete_call, found_paths, put
from .test_knowledge import get_call as get_document_call
from .test_review import decide, propose

OWNER = "memories:read,memories:write,memories:forget,memories:propose"
SEARCHED_TYPES = (
    "text", "character varying", "character", "json", "jsonb", "ARRAY", "tsvector", "bytea",
)  # fmt: skip


def holders(server: BrainServer, needles: dict[str, str]) -> dict[str, set[str]]:
    """For each needle, every ``table.column`` of the schema (read as the owner, so every
    tenant) holding it: text, json, array and tsvector columns as text, bytea columns as
    UTF-8 bytes. One pass over each table tests all its columns for all the needles."""

    async def scan() -> dict[str, set[str]]:
        conn = await asyncpg.connect(server.cluster.owner_dsn)
        try:
            columns = await conn.fetch(
                """SELECT c.table_name, c.column_name, c.data_type
                   FROM information_schema.columns c
                   JOIN information_schema.tables t USING (table_schema, table_name)
                   WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
                     AND c.data_type = ANY($1::text[])""",
                list(SEARCHED_TYPES),
            )
            assert {(r["table_name"], r["column_name"]) for r in columns} >= {
                ("memories", "content"),
                ("documents", "content"),
                ("document_chunks", "content"),
                ("document_chunks", "heading_path"),
                ("audit_events", "outcome"),
                ("idempotency_keys", "idempotency_key"),
            }
            tables: dict[str, list[asyncpg.Record]] = {}
            for row in columns:
                tables.setdefault(row["table_name"], []).append(row)
            names = list(needles)
            found: dict[str, set[str]] = {name: set() for name in needles}
            for table, rows in tables.items():
                # Each column read (and cast to text) once per row, in a subquery the
                # planner keeps (OFFSET 0); $1 holds the needles, bytea columns are searched
                # for their UTF-8 bytes.
                values, tests, holds = [], [], []
                for c, row in enumerate(rows):
                    column, binary = row["column_name"], row["data_type"] == "bytea"
                    values.append(f'"{column}" AS c{c}' if binary else f'"{column}"::text AS c{c}')
                    for n, name in enumerate(names, start=1):
                        needle = f"($1::text[])[{n}]"
                        tests.append(
                            f"bool_or(position(convert_to({needle}, 'UTF8') IN c{c}) > 0)"
                            if binary
                            else f"bool_or(c{c} ILIKE '%' || {needle} || '%')"
                        )
                        holds.append((name, f"{table}.{column}"))
                hit = await conn.fetchrow(
                    f"SELECT {', '.join(tests)} FROM "
                    f'(SELECT {", ".join(values)} FROM "{table}" OFFSET 0) s',
                    [needles[name] for name in names],
                )
                assert hit is not None
                for (name, where), held in zip(holds, hit, strict=True):
                    if held:
                        found[name].add(where)
            return found
        finally:
            await conn.close()

    return server.loop.run(scan())


async def test_forget_leaves_no_copy_anywhere_and_replays_answer_retracted(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Before the forget each value is found in the memory rows; after it, in no table at all,
    and replaying the save, the update and the proposal shows the retracted, blank memory."""
    token = secrets.token_hex(6)
    needles = {
        "text": f"kestrel{token}",
        "second": f"merlin{token}",
        "tag": f"tagged{token}",
        "meta": f"meta{token}",
        "proposal": f"because{token}",
        "review": f"checked{token}",
    }
    tenant = unique("edge-e")
    owner = Api(channel, brain_server.mint_key(tenant, "owner", permissions=OWNER))
    reviewer = Api(
        channel,
        brain_server.mint_key(tenant, "carol", permissions="memories:read,memories:review"),
    )
    save_req = memory_pb2.SaveMemoryRequest(
        scope=owner.scope(),
        memory=common_pb2.MemoryDraft(
            content=f"the falcon code is {needles['text']}",
            tags=[needles["tag"]],
            metadata={"source": needles["meta"]},
        ),
        idempotency_key="save-1",
    )
    saved = (await owner.memories.SaveMemory(save_req, metadata=owner.md)).memory
    update_req = memory_pb2.UpdateMemoryRequest(
        scope=owner.scope(),
        id=saved.id,
        patch=common_pb2.MemoryDraft(content=f"the falcon code is now {needles['second']}"),
        update_mask={"paths": ["content"]},
        idempotency_key="update-1",
    )
    await owner.memories.UpdateMemory(update_req, metadata=owner.md)
    proposed = await propose(
        owner, f"the falcon backup is {needles['text']}", reason=needles["proposal"],
        idempotency_key="propose-1",
    )  # fmt: skip
    await decide(reviewer, proposed.id, approve=True, reason=needles["review"])
    kept = (await owner.save(f"unrelated falcon fact {token}")).memory.id

    # Positive control: the same search finds every value in the memory rows.
    before = holders(brain_server, needles)
    assert "memories.content" in before["text"] and "memories.content" in before["second"]
    assert "memories.tags" in before["tag"] and "memories.metadata" in before["meta"]
    assert "memories.proposal_reason" in before["proposal"]
    assert "memories.review_reason" in before["review"]
    replayed = await owner.memories.SaveMemory(save_req, metadata=owner.md)
    assert replayed.outcome == memory_pb2.SAVE_OUTCOME_REPLAYED
    assert replayed.memory.content.endswith(needles["second"])  # the memory as it is now

    await owner.forget(saved.id)
    await owner.forget(proposed.id)

    after = holders(brain_server, needles)
    assert after == {name: set() for name in needles}
    # An unforgotten memory keeps its content.
    assert holders(brain_server, {"kept": f"unrelated falcon fact {token}"}) == {
        "kept": {"memories.content"}
    }

    replayed = await owner.memories.SaveMemory(save_req, metadata=owner.md)
    assert replayed.outcome == memory_pb2.SAVE_OUTCOME_REPLAYED
    assert (replayed.memory.id, replayed.memory.status, replayed.memory.content) == (
        saved.id,
        common_pb2.MEMORY_STATUS_RETRACTED,
        "",
    )
    assert not replayed.memory.tags and not replayed.memory.metadata
    updated = (await owner.memories.UpdateMemory(update_req, metadata=owner.md)).memory
    assert (updated.status, updated.content) == (common_pb2.MEMORY_STATUS_RETRACTED, "")
    again = await propose(
        owner, f"the falcon backup is {needles['text']}", reason=needles["proposal"],
        idempotency_key="propose-1",
    )  # fmt: skip
    assert (again.id, again.status, again.content, again.proposal_reason) == (
        proposed.id,
        common_pb2.MEMORY_STATUS_RETRACTED,
        "",
        "",
    )
    assert (await owner.get(kept)).content == f"unrelated falcon fact {token}"


async def test_replay_of_a_memory_the_key_no_longer_sees_answers_like_a_random_id(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A replayed save whose memory was since relabelled away from the key fails exactly like
    a Get of a random id; replayed before the relabel it returns the memory."""
    tenant = unique("edge-r")
    saver = Api(channel, brain_server.mint_key(tenant, "saver"))
    wide = Api(channel, brain_server.mint_key(tenant, "wide", labels=("team", "secret")))
    req = memory_pb2.SaveMemoryRequest(
        scope=saver.scope(),
        memory=common_pb2.MemoryDraft(content="replayed osprey plan"),
        idempotency_key="k1",
    )
    first = await saver.memories.SaveMemory(req, metadata=saver.md)
    again = await saver.memories.SaveMemory(req, metadata=saver.md)
    assert (again.outcome, again.memory.id) == (memory_pb2.SAVE_OUTCOME_REPLAYED, first.memory.id)
    await wide.update(first.memory.id, ["labels"], labels=["secret"])
    hidden = await outcome(saver.memories.SaveMemory(req, metadata=saver.md))
    assert hidden == await outcome(get_call(saver, RANDOM_ID))
    assert hidden[0] == grpc.StatusCode.NOT_FOUND


async def test_forget_erases_the_graph_the_memory_alone_asserted(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Issue 19: before the forget the entity, its alias and type, and the relation are in
    the graph tables and found by lookup; after it no table holds them, the entity answers
    like a name never used, and an entity another memory still asserts keeps that
    memory's relation only."""
    from .graph_helpers import draft, facts, lookup_call
    from .graph_helpers import save as save_graph

    token = secrets.token_hex(6)
    needles = {"entity": f"kestrel{token}", "alias": f"kes{token}", "type": f"raptor{token}"}
    owner = Api(channel, brain_server.mint_key(unique("edge-g"), "owner", permissions=OWNER))
    cliff = f"Cliff{token}"
    forgotten = await save_graph(
        owner, "a bird nests on the cliff",
        draft([(needles["entity"], needles["type"], [needles["alias"]])],
              [(needles["entity"], "nests_on", cliff)]),
    )  # fmt: skip
    await save_graph(owner, "the cliff faces the sea", draft([], [(cliff, "faces", "Sea")]))

    before = holders(brain_server, needles)
    assert "graph_entities.name_norm" in before["entity"]
    assert "graph_mentions.name" in before["entity"]
    assert "graph_mentions.aliases" in before["alias"]
    assert "graph_mentions.type" in before["type"]
    assert (await lookup_call(owner, needles["alias"])).entity.degree == 1
    assert (await lookup_call(owner, cliff)).entity.degree == 2

    await owner.forget(forgotten.memory.id)

    assert holders(brain_server, needles) == {name: set() for name in needles}
    unknown = await outcome(lookup_call(owner, f"never{token}"))
    assert unknown[0] == grpc.StatusCode.NOT_FOUND
    assert await outcome(lookup_call(owner, needles["entity"])) == unknown
    kept = await lookup_call(owner, cliff)
    assert facts(kept) == {(cliff.lower(), "faces", "sea")}
    assert (kept.entity.mention_count, kept.entity.degree) == (1, 1)


async def test_delete_erases_every_version_and_chunk_and_is_audited(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """After a delete no column of any table holds the document's text, headings or path;
    ids and the audit events (put, erase, delete) remain, listed to the tenant's auditor."""
    token = secrets.token_hex(5)
    needles = {
        "v1": f"heron{token}",
        "v2": f"egret{token}",
        "heading": f"Crane{token}",
        "path": f"stork{token}",
    }
    tenant = unique("kb")
    api = Api(
        channel,
        brain_server.mint_key(tenant, "owner", permissions=f"{KB},audit:read,memories:read"),
    )
    path = f"birds/{needles['path']}.md"
    doc = (await put(api, path, f"# {needles['heading']}\n\nthe {needles['v1']} nests\n")).document
    await put(api, path, f"# {needles['heading']}\n\nthe {needles['v2']} nests\n")
    kept = (await put(api, "kept.md", f"# Kept\n\nkept{token} stays\n")).document
    before = holders(brain_server, needles)
    assert {"documents.content", "document_chunks.content"} <= before["v1"]
    assert {"documents.content", "document_chunks.content"} <= before["v2"]
    assert "document_chunks.heading_path" in before["heading"]
    assert {"documents.path", "document_chunks.path"} <= before["path"]

    deleted = await delete_call(api, doc.id)
    assert deleted.version == 3
    assert holders(brain_server, needles) == {name: set() for name in needles}
    assert holders(brain_server, {"kept": f"kept{token}"})["kept"] >= {"documents.content"}
    gone = (await get_document_call(api, doc.id, include_content=True)).document
    assert (gone.status, gone.content, gone.path, gone.content_hash) == (
        knowledge_pb2.DOCUMENT_STATUS_DELETED, "", "", "",
    )  # fmt: skip
    assert (await delete_call(api, doc.id)).version == 3  # twice: a no-op
    assert await found_paths(api, f"egret{token}", lexical_only=True) == set()
    assert await found_paths(api, f"kept{token}", lexical_only=True) == {"kept.md"}

    events = await api.audit.ListAuditEvents(
        audit_pb2.ListAuditEventsRequest(scope=api.scope()),
        metadata=api.md,
    )
    about = [
        (e.method.rsplit("/", 1)[-1], e.outcome) for e in events.events if doc.id in e.memory_ids
    ]
    assert about == [
        ("PutDocument", "document.put"),
        ("PutDocument", "document.put"),
        ("DeleteDocument", "document.erase,document.delete"),
    ]
    assert any(kept.id in e.memory_ids for e in events.events)
    outsider = Api(channel, brain_server.mint_key(unique("kb"), "o", permissions="audit:read"))
    theirs = await outsider.audit.ListAuditEvents(
        audit_pb2.ListAuditEventsRequest(scope=outsider.scope()),
        metadata=outsider.md,
    )
    assert not any(doc.id in e.memory_ids for e in theirs.events)
    assert any(e.method.startswith("admin.") for e in theirs.events)  # control: its own
