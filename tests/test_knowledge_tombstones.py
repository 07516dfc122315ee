"""Document tombstones (issue 31): a deleted document's content cannot be put back in the
same collection unnoticed. Without ``readmit_tombstoned`` such a put is FAILED_PRECONDITION
naming the tombstone and writes nothing; with it the put lifts the tombstone. A tombstone is
a side record of its document: it binds only keys that could see the document (to any other
the content was never there), row-level security gives it the document's walls, and it holds
no text, path or plain hash.

Every refusal here is shown beside a put that the same rule lets through.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import asyncpg
import grpc

from brain.v1 import knowledge_pb2

from .conftest import BrainServer, unique
from .helpers import Api, rpc_error
from .test_knowledge import KB, delete_call, list_docs, put

HANDBOOK = "# Handbook\n\nThe vault code is 4321 and rotates monthly.\n"
REVISED = "# Handbook\n\nThe vault code is 8765 and rotates weekly.\n"


def tombstones(server: BrainServer, document_id: str) -> list[dict[str, object]]:
    rows = server.sql(
        "SELECT collection, labels, readmitted_by, fingerprint FROM document_tombstones"
        " WHERE document_id = $1 ORDER BY created_at",
        document_id,
    )
    return [dict(r) for r in rows]


def stored_at(server: BrainServer, tenant: str, path: str) -> int:
    rows = server.sql(
        "SELECT count(*) AS n FROM documents d JOIN tenants t USING (tenant_id)"
        " WHERE t.name = $1 AND d.path = $2",
        tenant,
        path,
    )
    return int(rows[0]["n"])


async def test_a_deleted_documents_content_comes_back_only_when_the_put_says_so(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """After a delete, a put of any content the document had (any version, at any path of
    the collection, with other line endings) is FAILED_PRECONDITION naming the tombstone
    and the flag, and writes nothing; new content, the content cased or indented anew (a
    different file: Python and YAML read indentation), another collection and a put with
    readmit_tombstoned are stored (controls), and the readmitted content is free again."""
    tenant = unique("tomb")
    api = Api(channel, brain_server.mint_key(tenant, "w", permissions=KB))
    first = (await put(api, "ops/handbook.md", HANDBOOK)).document
    assert (await put(api, "ops/handbook.md", REVISED)).document.version == 2
    await delete_call(api, first.id)
    held = tombstones(brain_server, first.id)
    assert len(held) == 2 and all(t["collection"] == "docs" for t in held)

    for path, text in [
        ("ops/handbook.md", HANDBOOK),  # where it was
        ("elsewhere.md", REVISED),  # the later version, at another path
        ("copy.md", "\ufeff" + HANDBOOK.replace("\n", "\r\n")),  # CRLF and a BOM
    ]:
        err = await rpc_error(put(api, path, text))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, path
        details = err.details() or ""
        assert details.startswith("content: a document with this content was deleted")
        assert "tombstone" in details and "readmit_tombstoned" in details
        assert "handbook.md" not in details  # the erased path is not told
        assert stored_at(brain_server, tenant, path) == 0  # nothing written
    # Controls: new content, and the same content in another collection, are stored.
    fresh = await put(api, "ops/handbook.md", "# Handbook\n\nNew text entirely.\n")
    assert fresh.outcome == knowledge_pb2.PUT_OUTCOME_CREATED
    other = await put(api, "handbook.md", HANDBOOK, collection="archive")
    assert other.outcome == knowledge_pb2.PUT_OUTCOME_CREATED
    cased = await put(api, "cased.md", HANDBOOK.upper())
    assert cased.outcome == knowledge_pb2.PUT_OUTCOME_CREATED
    spaced = await put(api, "spaced.md", HANDBOOK.replace("The vault", "  The vault"))
    assert spaced.outcome == knowledge_pb2.PUT_OUTCOME_CREATED
    # The caller says so: the content is put back and its tombstone lifted.
    back = await put(api, "restored.md", HANDBOOK, readmit_tombstoned=True)
    assert back.outcome == knowledge_pb2.PUT_OUTCOME_CREATED
    lifted = [t for t in tombstones(brain_server, first.id) if t["readmitted_by"] == "w"]
    assert len(lifted) == 1
    again = await put(api, "restored-twice.md", HANDBOOK)  # no longer held
    assert again.outcome == knowledge_pb2.PUT_OUTCOME_CREATED
    still = await rpc_error(put(api, "revised-again.md", REVISED))  # the other still is
    assert still.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_tombstone_left_before_fingerprints_were_exact_still_holds(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Tombstones made before content fingerprints were exact hold the case-folded,
    whitespace-collapsed fingerprint: a put is checked against both, so none lapsed with
    the upgrade. Here a tombstone is given the old fingerprint: the content, cased anew,
    is still refused by it (and by nothing else: the control put of new text is stored)."""
    from brain.server.domain.knowledge.documents import folded_fingerprint

    assert brain_server.running is not None
    pepper = brain_server.running.memories.pepper
    api = Api(channel, brain_server.mint_key(unique("tomb"), "w", permissions=KB))
    doc = (await put(api, "old.md", HANDBOOK)).document
    await delete_call(api, doc.id)
    brain_server.sql(
        "UPDATE document_tombstones SET fingerprint = $1 WHERE document_id = $2",
        folded_fingerprint(pepper, HANDBOOK),
        doc.id,
    )
    err = await rpc_error(put(api, "cased.md", HANDBOOK.upper()))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    fresh = await put(api, "fresh.md", "# Handbook\n\nSomething else.\n")
    assert fresh.outcome == knowledge_pb2.PUT_OUTCOME_CREATED


async def test_a_tombstone_binds_only_keys_that_could_see_the_document(
    walled_server: BrainServer,
) -> None:
    """A key whose labels never covered the deleted document puts its content as any new
    content (CREATED, nothing to tell them apart): the tombstone is no existence oracle. The
    same key is held by a tombstone of its own document, and the deleting key by this one
    (controls); a write-only key that could see the document is held too. The same with
    the application's predicate off (row-level security alone)."""
    async with walled_server.channel() as channel:
        await tombstone_walls(walled_server, channel)


async def tombstone_walls(brain_server: BrainServer, channel: grpc.aio.Channel) -> None:
    tenant = unique("tomb")
    hr = Api(channel, brain_server.mint_key(tenant, "hr", permissions=KB, labels=("team", "hr")))
    team = Api(channel, brain_server.mint_key(tenant, "team", permissions=KB))
    writer = Api(
        channel,
        brain_server.mint_key(tenant, "bot", permissions="knowledge:write", labels=("hr",)),
    )
    salaries = "# Pay\n\nSalary bands are under review.\n"
    secret = (await put(hr, "pay.md", salaries, labels=["hr"])).document
    await delete_call(hr, secret.id)
    ours = (await put(team, "notes.md", "# Notes\n\nTeam notes.\n")).document
    await delete_call(team, ours.id)

    unseen = await put(team, "pay.md", salaries)  # the team key never saw the hr document
    fresh = await put(team, "fresh.md", "# Fresh\n\nNever here before.\n")
    assert unseen.outcome == fresh.outcome == knowledge_pb2.PUT_OUTCOME_CREATED
    shape = [
        (r.document.version, r.document.status, r.document.chunk_count) for r in (unseen, fresh)
    ]
    assert shape == [(1, knowledge_pb2.DOCUMENT_STATUS_ACTIVE, 1)] * 2  # told apart by nothing
    own = await rpc_error(put(team, "notes-again.md", "# Notes\n\nTeam notes.\n"))
    assert own.code() == grpc.StatusCode.FAILED_PRECONDITION  # control: its own binds it
    for api in (hr, writer):  # could see it: bound, whether or not it may read
        err = await rpc_error(put(api, "pay-again.md", salaries, labels=["hr"]))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert [d.path for d in await list_docs(hr) if d.path.startswith("pay")] == ["pay.md"]


async def test_tombstone_rows_have_their_documents_walls_under_row_level_security(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """As the server's role, with only row-level security deciding: a transaction with the
    team label sees its tenant's team tombstone and not the hr one, nor another tenant's;
    with the hr label it sees the hr one (control); it cannot insert one under labels or a
    tenant it does not hold; and no tombstone holds the text, the path or its SHA-256."""
    tenant, other = unique("tomb"), unique("tomb")
    hr = Api(channel, brain_server.mint_key(tenant, "hr", permissions=KB, labels=("team", "hr")))
    stranger = Api(channel, brain_server.mint_key(other, "x", permissions=KB))
    docs = {}
    for api, path, labels in ((hr, "team.md", ["team"]), (hr, "hr.md", ["hr"]),
                              (stranger, "x.md", ["team"])):  # fmt: skip
        text = f"# {path}\n\nthe walled text of {path}\n"
        docs[path] = (await put(api, path, text, labels=labels)).document
        await delete_call(api, docs[path].id)
    tenant_id = str(brain_server.sql("SELECT tenant_id FROM tenants WHERE name = $1", tenant)[0][0])

    async def probe(labels: str) -> tuple[set[str], str]:
        conn = await asyncpg.connect(brain_server.cluster.app_dsn)
        try:
            async with conn.transaction():
                await conn.execute(
                    "SELECT set_config('brain.tenant_id', $1, true),"
                    " set_config('brain.labels', $2, true)",
                    tenant_id,
                    labels,
                )
                seen = {str(r[0]) for r in await conn.fetch(
                    "SELECT document_id FROM document_tombstones")}  # fmt: skip
            try:
                async with conn.transaction():
                    await conn.execute(
                        "SELECT set_config('brain.tenant_id', $1, true),"
                        " set_config('brain.labels', $2, true)",
                        tenant_id,
                        labels,
                    )
                    await conn.execute(
                        """INSERT INTO document_tombstones (tenant_id, tombstone_id, namespace,
                               user_id, session_id, collection, labels, fingerprint,
                               document_id, created_by)
                           VALUES ($1::uuid, gen_random_uuid(), 'proj', '', '', 'docs',
                                   '{secret}', '\\x00', gen_random_uuid(), 'x')""",
                        tenant_id,
                    )
                inserted = "inserted"
            except asyncpg.InsufficientPrivilegeError:
                inserted = "refused"
            return seen, inserted
        finally:
            await conn.close()

    team_sees, insert = brain_server.loop.run(probe("{team}"))
    hr_sees, _ = brain_server.loop.run(probe("{hr}"))
    assert team_sees == {docs["team.md"].id} and insert == "refused"
    assert hr_sees == {docs["hr.md"].id}

    for path in docs:
        text = f"# {path}\n\nthe walled text of {path}\n"
        leaks = brain_server.sql(
            "SELECT count(*) AS n FROM document_tombstones t"
            " WHERE position($1::bytea IN t.fingerprint) > 0 OR t.collection LIKE '%' || $2"
            " OR t.fingerprint = $3",
            text.encode(),
            path,
            hashlib.sha256(text.encode()).digest(),
        )
        assert leaks[0]["n"] == 0


async def test_a_put_racing_a_delete_of_the_same_content_never_slips_past_it(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A put of a document's content at another path, racing that document's delete,
    either commits first (and stays: it is another document) or is refused: a put that
    commits after the delete is never one that checked before it."""
    api = Api(channel, brain_server.mint_key(unique("tomb"), "w", permissions=KB))
    for n in range(4):
        text = f"# Race {n}\n\nshared text {n}\n"
        doc = (await put(api, f"a{n}.md", text)).document
        copied, deleted = await asyncio.gather(
            put(api, f"b{n}.md", text), delete_call(api, doc.id), return_exceptions=True
        )
        assert not isinstance(deleted, BaseException)
        events = brain_server.sql(
            "SELECT seq, outcome FROM audit_events WHERE $1::uuid = ANY(memory_ids) ORDER BY seq",
            doc.id,
        )
        deleted_at = max(e["seq"] for e in events if "document.delete" in e["outcome"])
        if isinstance(copied, grpc.aio.AioRpcError):
            assert copied.code() == grpc.StatusCode.FAILED_PRECONDITION
        else:
            assert not isinstance(copied, BaseException)
            put_at = brain_server.sql(
                "SELECT seq FROM audit_events WHERE $1::uuid = ANY(memory_ids)",
                copied.document.id,
            )[0]["seq"]
            assert put_at < deleted_at


async def test_brain_admin_lists_document_tombstones_and_readmits_one(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """`brain-admin tombstones list` shows a deleted document's tombstones (kind, document,
    collection; no fingerprint, path or text) beside memory ones; `readmit` lifts one, and
    that content is stored again while the other stays held (control)."""
    tenant = unique("tomb")
    api = Api(channel, brain_server.mint_key(tenant, "w", permissions=KB))
    doc = (await put(api, "h.md", HANDBOOK)).document
    await put(api, "h.md", REVISED)
    await delete_call(api, doc.id)
    listed = json.loads(
        brain_server.admin("tombstones", "list", "--tenant", tenant, "--json").stdout
    )
    assert [(t["kind"], t["document_id"], t["collection"]) for t in listed] == [
        ("document", doc.id, "docs")
    ] * 2
    assert not any("fingerprint" in t or "path" in t for t in listed)
    first = listed[0]["tombstone_id"]
    lifted = brain_server.sql(
        "SELECT fingerprint FROM document_tombstones WHERE tombstone_id = $1", first
    )[0]["fingerprint"]
    brain_server.admin("tombstones", "readmit", first, "--tenant", tenant)
    freed, held = [], []
    for n, text in enumerate((HANDBOOK, REVISED)):
        try:
            await put(api, f"again{n}.md", text)
            freed.append(text)
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION
            held.append(text)
    assert len(freed) == len(held) == 1
    remaining = brain_server.sql(
        "SELECT fingerprint FROM document_tombstones WHERE document_id = $1"
        " AND readmitted_at IS NULL",
        doc.id,
    )
    assert [r["fingerprint"] for r in remaining] != [lifted]


async def test_a_moved_files_old_document_leaves_no_tombstone_for_what_moved(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A rename as `brain ingest --prune` makes it: the content put at the new path, then
    the old path's document deleted. That deletion rejects no content, so the file can
    move back (a tombstone refused it). Deleting the last document holding a content still
    leaves one (control), and a copy the deleting key cannot see does not count: its
    content is tombstoned as if the copy were not there."""
    tenant = unique("tombmv")
    api = Api(channel, brain_server.mint_key(tenant, "w", permissions=KB))
    old = (await put(api, "a.md", HANDBOOK)).document
    new = (await put(api, "b.md", HANDBOOK)).document
    await delete_call(api, old.id)
    assert tombstones(brain_server, old.id) == []
    back = await put(api, "a.md", HANDBOOK)
    assert back.outcome == knowledge_pb2.PUT_OUTCOME_CREATED
    await delete_call(api, new.id)
    assert tombstones(brain_server, new.id) == []
    await delete_call(api, back.document.id)  # the last one holding it
    assert len(tombstones(brain_server, back.document.id)) == 1
    err = await rpc_error(put(api, "c.md", HANDBOOK))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    hr = Api(channel, brain_server.mint_key(tenant, "h", permissions=KB, labels=("hr",)))
    hidden = (await put(hr, "secret.md", REVISED)).document
    mine = (await put(api, "mine.md", REVISED)).document
    assert [d.path for d in await list_docs(api)] == ["mine.md"]  # hr's copy is not in view
    await delete_call(api, mine.id)
    assert len(tombstones(brain_server, mine.id)) == 1
    assert [d.id for d in await list_docs(hr)] == [hidden.id]  # (and it is still there)
