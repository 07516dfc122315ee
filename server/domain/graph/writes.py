"""The graph's side of memory writes, inside the memory's own transaction."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from brain.server.domain.graph.assertions import Assertions
from brain.server.storage import graph as sql
from brain.server.storage.visibility import Visibility


async def assert_graph(
    conn: asyncpg.Connection,
    v: Visibility,
    tenant_id: Any,
    memory_id: uuid.UUID,
    assertions: Assertions,
    at: datetime,
    *,
    pending: bool,
) -> None:
    """Attach ``assertions`` to the memory; unless pending, close single-valued
    predecessors. Pending relations keep the writer's write confinement for approval."""
    if not assertions:
        return
    ids = await sql.entity_ids(conn, [m.name_norm for m in assertions.mentions])
    await sql.insert_mentions(conn, tenant_id, memory_id, assertions.mentions, ids, at, pending)
    if assertions.relations:
        c = v.confinement
        await sql.insert_relations(
            conn, tenant_id, memory_id, assertions.relations, ids, at, pending,
            writer=(c.user_id, c.session_id) if pending else (None, None),
        )  # fmt: skip
    if not pending and any(r.cardinality == "one" for r in assertions.relations):
        await sql.close_predecessors(conn, v, tenant_id, memory_id, at)


async def replace_graph(
    conn: asyncpg.Connection,
    v: Visibility,
    tenant_id: Any,
    memory_id: uuid.UUID,
    assertions: Assertions,
    at: datetime,
) -> None:
    """UpdateMemory of ``graph``: the old assertions retire, the new ones take over."""
    await sql.retire_memory(conn, tenant_id, memory_id, at)
    await assert_graph(conn, v, tenant_id, memory_id, assertions, at, pending=False)


async def approve(
    conn: asyncpg.Connection, tenant_id: Any, memory_id: uuid.UUID, at: datetime
) -> None:
    """An approved proposal's assertions join the graph now. What they close depends on
    the memories' scopes and the proposer's write power, never on the reviewer's."""
    await sql.activate_memory(conn, tenant_id, memory_id, at)
    await sql.close_predecessors(conn, None, tenant_id, memory_id, at)


async def rescope(
    conn: asyncpg.Connection, v: Visibility, memory_id: uuid.UUID, at: datetime
) -> None:
    """The memory's labels or expiry changed: who sees it changed, so the closes it made
    and those of its facts are undone, and it closes again what the rule allows now."""
    await sql.reopen(conn, memory_id, closed=True)
    await sql.close_predecessors(conn, v, v.tenant_id, memory_id, at)


retire = sql.retire_memory
erase = sql.erase_memory
