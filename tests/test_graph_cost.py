"""A graph write costs what it asserts, not what its tenant holds.

brain-eval conflicts found approvals of a single-valued relation running out of time: on
tables the planner has no statistics for (a new database, or a tenant grown since the
last ANALYZE) it estimated one row per tenant and nested whole-tenant scans, every row
checked by row-level security's definer function ``brain_key_may_see_head``; an entity's
policy read every mention of the tenant to show one entity. The cost grew with the cube of
the tenant's relations. This test makes such a database (fresh, autovacuum off) and
counts what cannot depend on the machine's speed: the definer calls and the buffers the
statements of an approval read, measured as the app role (row-level security on) for the
same approval in a small and in a grown tenant.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import grpc
import pytest

from brain.authz import Confinement, RequestScope
from brain.server.runtime import embedded
from brain.server.storage import conflicts, graph, migrate
from brain.server.storage.visibility import Visibility
from brain.v1 import common_pb2, graph_pb2, review_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .graph_helpers import draft, propose, save
from .helpers import Api

WRITER = "memories:read,memories:write,memories:propose"
REVIEWER = "memories:read,memories:review"
# Tables the statements read; never analyzed here, as in a database just created.
TABLES = ("memories", "graph_entities", "graph_mentions", "graph_relations")
HEAD = "brain_key_may_see_head(uuid,uuid)"


@pytest.fixture(scope="module")
def fresh_server(pg_cluster: PgCluster, loop_thread: LoopThread) -> Iterator[BrainServer]:
    """A brain-server on a database of its own, migrated and never analyzed."""
    pg = pg_cluster.embedded_pg
    name = unique("graphcost").replace("-", "_")

    async def create() -> None:
        boot = await asyncpg.connect(pg.bootstrap_dsn)
        try:
            await boot.execute(f"CREATE DATABASE {name}")
        finally:
            await boot.close()
        await migrate.migrate(pg.dsn(embedded.OWNER_ROLE, name))
        owner = await asyncpg.connect(pg.dsn(embedded.OWNER_ROLE, name))
        try:
            for table in TABLES:
                await owner.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        finally:
            await owner.close()

    async def drop() -> None:
        boot = await asyncpg.connect(pg.bootstrap_dsn)
        try:
            await boot.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await boot.close()

    loop_thread.run(create())
    cluster = PgCluster(
        pg=None,
        pepper_file=pg_cluster.pepper_file,
        pepper=pg_cluster.pepper,
        external_owner_dsn=pg.dsn(embedded.OWNER_ROLE, name),
        external_app_dsn=pg.dsn(embedded.APP_LOGIN_ROLE, name),
    )
    server = BrainServer(cluster=cluster, loop=loop_thread, settings=server_settings(cluster))
    server.start()
    try:
        yield server
    finally:
        server.stop()
        loop_thread.run(drop())


class Explained:
    """Stands in for the connection: each statement runs first under EXPLAIN (ANALYZE,
    BUFFERS) in a savepoint rolled back, where the definer calls it makes and the shared
    buffers it reads are counted, then for real."""

    def __init__(self, conn: asyncpg.Connection, head: int) -> None:
        self.conn = conn
        self.head = head  # brain_key_may_see_head's oid
        self.calls = 0
        self.buffers = 0

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        await self.measure(sql, *args)
        return list(await self.conn.fetch(sql, *args))

    async def execute(self, sql: str, *args: Any) -> str:
        await self.measure(sql, *args)
        return str(await self.conn.execute(sql, *args))

    async def measure(self, sql: str, *args: Any) -> None:
        calls = "SELECT COALESCE(pg_stat_get_xact_function_calls($1), 0)"
        savepoint = self.conn.transaction()
        await savepoint.start()
        try:
            before = await self.conn.fetchval(calls, self.head)
            rows = await self.conn.fetch("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *args)
            self.calls += await self.conn.fetchval(calls, self.head) - before
        finally:
            await savepoint.rollback()
        plan = json.loads(rows[0][0])[0]["Plan"]
        self.buffers += plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]


async def approval_cost(server: BrainServer, tenant: str, memory_id: str) -> tuple[int, int]:
    """Definer calls and buffers of closing the approved ``memory_id``'s predecessors
    again and finding its slot peers, as the reviewer's transaction runs them (rolled
    back; the closes it made are undone first, so the close has the same work to do)."""
    conn = await asyncpg.connect(server.cluster.owner_dsn)
    try:
        tenant_id = str(
            await conn.fetchval("SELECT tenant_id FROM tenants WHERE name = $1", tenant)
        )
        head = await conn.fetchval("SELECT $1::regprocedure::oid", HEAD)
        v = Visibility(
            tenant_id, frozenset({"team"}), Confinement(), RequestScope(namespace="proj"),
            principal="reviewer", may_review=True,
        )  # fmt: skip
        memory = await conn.fetchval("SELECT $1::uuid", memory_id)
        cost = (0, 0)
        for _ in range(2):  # the first pass warms the caches the second one measures
            tx = conn.transaction()
            await tx.start()
            try:
                await conn.execute("SET LOCAL track_functions = 'pl'")  # as the superuser
                await conn.execute(f"SET LOCAL ROLE {embedded.APP_LOGIN_ROLE}")
                await conn.execute(
                    f"SET LOCAL brain.tenant_id = '{tenant_id}'; SET LOCAL brain.labels = "
                    "'{team}'; SET LOCAL brain.may_review = 'on'; "
                    "SET LOCAL brain.principal = 'reviewer'"
                )
                await graph.reopen(conn, memory, closed=False)
                x = Explained(conn, head)
                at = datetime.now(UTC)
                closed = await graph.close_predecessors(x, None, tenant_id, memory, at)  # type: ignore[arg-type]
                peers = await conflicts.slot_peers(x, v, memory)  # type: ignore[arg-type]
                assert (closed, len(peers)) == (1, 1), "the measured statements did no work"
                cost = (x.calls, x.buffers)
            finally:
                await tx.rollback()
        return cost
    finally:
        await conn.close()


def headquarters(subject: str, city: str) -> graph_pb2.GraphDraft:
    return draft([subject, city], [(subject, "headquartered_in", city)], one=["headquartered_in"])


async def slot_change(writer: Api, reviewer: Api, subject: str) -> tuple[str, list[Any]]:
    """``subject`` is headquartered in Oslo, then a proposal moves it to Lima and is
    approved: the new memory's id and the conflicts the approval reported."""
    await save(writer, f"{subject} sits in Oslo", headquarters(subject, "Oslo"))
    moved = await propose(writer, f"{subject} moved to Lima", headquarters(subject, "Lima"))
    approved = await reviewer.review.ReviewCandidate(
        review_pb2.ReviewCandidateRequest(
            scope=reviewer.scope(), id=moved.id, decision=review_pb2.REVIEW_DECISION_APPROVE,
            reason="checked",
        ),
        metadata=reviewer.md,
    )  # fmt: skip
    return moved.id, list(approved.conflicts)


async def grow(writer: Api, saves: int, start: int) -> None:
    """``saves`` memories of 32 facts each, about subjects of their own."""
    for s in range(start, start + saves):
        g = graph_pb2.GraphDraft()
        for i in range(32):
            g.entities.add(name=f"team {s}-{i}")
            g.entities.add(name=f"project {s}-{i}")
            g.relations.add(
                subject=f"team {s}-{i}", predicate="runs", object=f"project {s}-{i}",
                cardinality=graph_pb2.CARDINALITY_ONE if i % 2 else graph_pb2.CARDINALITY_MANY,
            )  # fmt: skip
        await save(writer, f"Roster {s}: who runs what", g)


@pytest.fixture
async def channel_to(fresh_server: BrainServer) -> AsyncIterator[grpc.aio.Channel]:
    async with fresh_server.channel() as ch:
        yield ch


async def test_an_approval_reads_the_same_however_large_the_tenant_grows(
    fresh_server: BrainServer, channel_to: grpc.aio.Channel
) -> None:
    """Approving a slot change in a tenant of 32 facts and in one of 320 (no statistics):
    the same definer calls, and buffers that do not grow with the tenant."""
    tenant = unique("cost")
    writer = Api(channel_to, fresh_server.mint_key(tenant, "writer", permissions=WRITER))
    reviewer = Api(channel_to, fresh_server.mint_key(tenant, "reviewer", permissions=REVIEWER))
    await grow(writer, 1, 0)
    small_id, reported = await slot_change(writer, reviewer, "Quanta Foods")
    # Control: the approval did its work, so the measured statements have work to do.
    assert [c.rule for c in reported] == [common_pb2.CONFLICT_RULE_SLOT]
    small = await approval_cost(fresh_server, tenant, small_id)
    await grow(writer, 9, 1)
    large_id, reported = await slot_change(writer, reviewer, "Helios Energy")
    assert [c.rule for c in reported] == [common_pb2.CONFLICT_RULE_SLOT]
    large = await approval_cost(fresh_server, tenant, large_id)
    assert small[0] > 0, "no definer call counted: the measure would prove nothing"
    assert large[0] == small[0], (small, large)
    assert large[1] <= 2 * small[1], (small, large)
