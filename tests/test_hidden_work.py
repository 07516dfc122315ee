"""Issue 32, the timing channel: the work an audit page or a Watch batch does for a key
does not grow with the events that key cannot see.

Measured the way the database counts it, never with a clock: the statement the server
runs, EXPLAIN (ANALYZE, BUFFERS) as the app role with the key's settings, summing the rows
every plan node produced or threw away and the shared buffers it touched."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import grpc

from brain.authz import Confinement, RequestScope
from brain.server.domain import watch
from brain.server.storage import audit as sql
from brain.server.storage.db import Database
from brain.server.storage.memories import RowFilter
from brain.server.storage.visibility import Visibility
from brain.v1 import audit_pb2, common_pb2, review_pb2

from .conftest import BrainServer, unique
from .helpers import Api

HIDDEN = 16  # hidden events of each phase (each kind of hidden event repeats)


@dataclass(frozen=True)
class Work:
    rows: int  # rows produced by every node, times its loops, plus rows it filtered out
    buffers: int  # shared buffers hit or read
    descents: int  # index scans started (each may pay one more level as the index grows)
    plan: str = field(default="", compare=False, repr=False)  # the nodes, for a failure


def work_of(plan: dict[str, Any]) -> Work:
    """Add up a JSON plan, leaving out the reads of the cell directory (``audit_cells``):
    a few rows per bucket, label set and proposer, which grow with kinds of hidden rows,
    never with events (the documented bound), and whose index the planner may change."""
    rows = descents = directory = 0
    lines: list[str] = []

    def walk(node: dict[str, Any], depth: int = 0) -> None:
        nonlocal rows, descents, directory
        lines.append(
            "  " * depth
            + f"{node['Node Type']} {node.get('Index Name') or node.get('Relation Name') or ''}"
            + f" rows={node.get('Actual Rows')} loops={node.get('Actual Loops')}"
            + f" removed={node.get('Rows Removed by Filter', 0)} {node.get('Index Cond', '')}"
        )
        if node.get("Relation Name") == "audit_cells":
            directory += int(node.get("Shared Hit Blocks", 0)) + int(
                node.get("Shared Read Blocks", 0)
            )
            return
        loops = int(node.get("Actual Loops", 1))
        rows += int(node.get("Actual Rows", 0)) * loops
        for removed in ("Rows Removed by Filter", "Rows Removed by Index Recheck",
                        "Rows Removed by Join Filter"):  # fmt: skip
            rows += int(node.get(removed, 0)) * loops
        if "Index" in node["Node Type"]:
            descents += loops
        for child in node.get("Plans", []):
            walk(child, depth + 1)

    top = plan["Plan"]
    walk(top)
    buffers = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    return Work(rows, buffers - directory, descents, "\n".join(lines))


async def explain(db: Database, v: Visibility, statement: tuple[str, list[Any]]) -> Work:
    """Run ``statement`` under EXPLAIN ANALYZE as the app role, with ``v``'s key settings
    (row-level security applies as for the server), planned as PostgreSQL plans it once
    the tables are past a few pages (a sequential scan of a tiny table is cheaper than an
    index, and would read the hidden rows on its one page)."""
    text, values = statement
    async with db.tenant_tx(
        v.tenant_id,
        principal=v.principal,
        labels=v.labels,
        confinement=v.confinement,
        may_review=v.may_review,
        readonly=True,
    ) as conn:
        # As on tables of a realistic size: the few pages a test makes would be read whole.
        await conn.execute("SET LOCAL enable_seqscan = off")
        raw = await conn.fetchval(
            f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, FORMAT JSON) {text}", *values
        )
    return work_of(json.loads(raw)[0])


async def listed(api: Api) -> list[list[str]]:
    response = await api.audit.ListAuditEvents(
        audit_pb2.ListAuditEventsRequest(scope=api.scope(), page_size=100), metadata=api.md
    )
    return [list(e.memory_ids) for e in response.events]


async def test_audit_and_watch_work_does_not_grow_with_hidden_events(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A key confined to alice, and an unconfined key holding only the team label: their
    audit pages (whole, and for one memory) and Watch batches walk exactly the same rows
    after events they cannot see (hr-labelled notes and another agent's proposals, hidden
    from both; bob's private notes, another namespace and a hidden memory's updates,
    hidden from alice), and the buffers they touch grow at most by one index level per
    descent. Positive controls: each still lists its own events, and the same measure of
    the tenant-wide auditor's page grows with every event."""
    tenant = unique("t")
    audit_rw = "memories:read,memories:write,audit:read"
    alice = Api(channel, brain_server.mint_key(tenant, "alice", permissions=audit_rw,
                                               user="alice"), user_id="alice")  # fmt: skip
    bob = Api(channel, brain_server.mint_key(tenant, "bob", user="bob"), user_id="bob")
    hr = Api(channel, brain_server.mint_key(tenant, "hr", labels=("hr",)))
    agent = Api(channel, brain_server.mint_key(tenant, "agent", permissions="memories:propose"))
    team = Api(channel, brain_server.mint_key(tenant, "lead", permissions=audit_rw))
    elsewhere = Api(team.channel, team.key, namespace="elsewhere")
    tenant_id = str(brain_server.sql("SELECT tenant_id FROM tenants WHERE name = $1", tenant)[0][0])

    async def propose(content: str) -> None:
        await agent.review.ProposeMemory(
            review_pb2.ProposeMemoryRequest(
                scope=agent.scope(), memory=common_pb2.MemoryDraft(content=content),
                reason="worth keeping",
            ),
            metadata=agent.md,
        )  # fmt: skip

    mine = [(await alice.save(f"alice note {i}")).memory.id for i in range(3)]
    shared = (await team.save("the team deploys on Fridays")).memory.id
    secret = (await bob.save("bob's private note")).memory.id
    # One of each hidden kind exists before the first measurement: a read does look at the
    # directory of cells (bucket, label set, proposer), which grows with kinds, not events.
    await hr.save("the first hr matter", labels=["hr"])
    await propose("the first idea")
    await elsewhere.save("the first note elsewhere")
    brain_server.sql("ANALYZE audit_events, audit_cells, audit_cell_events, memories, documents")

    as_alice = Visibility(
        tenant_id, frozenset({"team"}), Confinement(user_id="alice"),
        RequestScope(namespace="proj", user_id="alice"), principal="alice",
    )  # fmt: skip
    as_team = Visibility(tenant_id, frozenset({"team"}), Confinement(), RequestScope(),
                         principal="lead")  # fmt: skip
    page = sql.EventQuery(after_seq=0, limit=101)
    statements = {
        "alice's page": (as_alice, lambda: sql.event_page_statement(tenant_id, page, as_alice,
                                                                    False)),
        "alice's page for her memory": (as_alice, lambda: sql.event_page_statement(
            tenant_id, sql.EventQuery(0, 101, memory_id=mine[0]), as_alice, False)),
        "alice's page for bob's memory": (as_alice, lambda: sql.event_page_statement(
            tenant_id, sql.EventQuery(0, 101, memory_id=secret), as_alice, False)),
        "alice's watch batch": (as_alice, lambda: sql.watch_batch_statement(as_alice, 0, 10**9,
                                                                            100)),
        "team's page": (as_team, lambda: sql.event_page_statement(tenant_id, page, as_team,
                                                                  True)),
        "team's watch batch": (as_team, lambda: sql.watch_batch_statement(as_team, 0, 10**9,
                                                                          100)),
    }  # fmt: skip
    chain = sql.event_page_statement(tenant_id, page, None, True)
    db = await Database.connect(brain_server.cluster.app_dsn, max_size=1)
    async with db.tenant_tx(
        tenant_id,
        principal="alice",
        labels=as_alice.labels,
        confinement=as_alice.confinement,
        readonly=True,
    ) as conn:
        alices = await sql.watch_batch(conn, as_alice, 0, 10**9, 100)  # fmt: skip
    everything = RowFilter(statuses=watch.ALL_STATUSES, hide_expired=False)
    statements["alice's watch rows"] = (
        as_alice,
        lambda: sql.changed_memories_statement(as_alice, everything, alices),
    )

    async def measure() -> dict[str, Work]:
        return {name: await explain(db, v, make()) for name, (v, make) in statements.items()}

    def unmoved(before: dict[str, Work], after: dict[str, Work], who: str) -> None:
        for name, work in before.items():
            if name.startswith(who):
                grown = after[name]
                assert grown.rows == work.rows, f"{name}\n{work.plan}\n---\n{grown.plan}"
                assert grown.descents == work.descents, (name, work, grown)
                assert grown.buffers <= work.buffers + work.descents, (name, work, grown)

    try:
        first = await measure()
        chain_first = await explain(db, as_team, chain)
        seen = (await listed(alice), await listed(team))
        for i in range(HIDDEN // 2):  # hidden from both
            await hr.save(f"an hr matter {i}", labels=["hr"])
            await propose(f"idea {i}")
        second = await measure()
        for i in range(HIDDEN // 4):  # hidden from alice only
            await bob.save(f"bob's private note {i}")
            await elsewhere.save(f"another namespace's note {i}")
            await bob.update(secret, ["importance"], importance=(i + 1) / 100)
        third = await measure()
        chain_third = await explain(db, as_team, chain)
    finally:
        await db.close()

    assert len(alices) == 4  # the same four events, as Watch finds them
    assert seen[0] == [[m] for m in mine] + [[shared]]  # positive control: hers, the team's
    assert await listed(alice) == seen[0]
    assert [shared] in seen[1]
    assert len(await listed(team)) == len(seen[1]) + 3 * HIDDEN // 4  # bob's and elsewhere
    assert chain_third.rows >= chain_first.rows + HIDDEN + 3 * HIDDEN // 4  # sees a walk grow
    unmoved(first, second, "")
    unmoved(first, third, "alice")
