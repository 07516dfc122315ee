"""SQL for the audit log. Events are written only by triggers (migration 0003).

The app role reads its own tenant's events (RLS plus an explicit tenant filter);
brain-admin, as the owner, reads every tenant's chain to verify it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from brain.server.storage.knowledge import DOCUMENT_COLUMNS
from brain.server.storage.memories import RowFilter, filter_predicate, memory_columns
from brain.server.storage.visibility import (
    Params,
    Visibility,
    object_visibility,
    visibility_predicate,
)

EVENT_COLUMNS = (
    "tenant_id, seq, at, key_id, principal, method, memory_ids, outcome, prev_hash, hash"
)
NOTIFY_CHANNEL = "brain_audit"


@dataclass(frozen=True, slots=True)
class EventQuery:
    after_seq: int
    limit: int
    memory_id: uuid.UUID | None = None
    principal: str = ""
    since: datetime | None = None


async def list_events(
    conn: asyncpg.Connection,
    tenant_id: str,
    q: EventQuery,
    v: Visibility | None,
    tenant_wide: bool,
) -> list[asyncpg.Record]:
    """Events of one tenant after ``q.after_seq``, oldest first, at most ``q.limit``;
    with ``v`` None (a tenant-wide auditor, ``audit:chain``) every one of them.

    An event about memories (or documents) is listed only when ``v`` may see every one it
    names (a
    memory's bucket never changes, so the ids say what it covers; labels and proposals
    bind as on every read). Tenant events (keys, policies), which name no memory, only
    when ``tenant_wide`` (a key confined to nothing).
    """
    p = Params(tenant_id, q.after_seq)
    clauses = ["tenant_id = $1::uuid", "seq > $2"]
    if v is not None:
        # The ids name memories or knowledge documents (migration 0020): each must be visible.
        every_memory_visible = f"""NOT EXISTS (
                    SELECT 1 FROM unnest(memory_ids) AS u (id)
                    WHERE NOT EXISTS (
                        SELECT 1 FROM memories m
                        WHERE m.tenant_id = audit_events.tenant_id AND m.memory_id = u.id
                          AND m.retired_at IS NULL AND {visibility_predicate(v, p)})
                      AND NOT EXISTS (
                        SELECT 1 FROM documents d
                        WHERE d.tenant_id = audit_events.tenant_id AND d.document_id = u.id
                          AND d.retired_at IS NULL AND {object_visibility(v, p, "d")}))"""
        if tenant_wide:
            clauses.append(f"(cardinality(memory_ids) = 0 OR {every_memory_visible})")
        else:
            clauses.append(f"cardinality(memory_ids) > 0 AND {every_memory_visible}")
    if q.memory_id is not None:
        clauses.append(f"memory_ids @> ARRAY[{p.add(q.memory_id)}::uuid]")
    if q.principal:
        clauses.append(f"principal = {p.add(q.principal)}")
    if q.since is not None:
        clauses.append(f"at >= {p.add(q.since)}")
    sql = f"""SELECT {EVENT_COLUMNS} FROM audit_events
              WHERE {" AND ".join(clauses)} ORDER BY seq LIMIT {p.add(q.limit)}"""
    return list(await conn.fetch(sql, *p.values))


async def head_seq(conn: asyncpg.Connection, tenant_id: str) -> int:
    """The newest event's seq in this tenant, 0 when there is none."""
    seq = await conn.fetchval(
        "SELECT COALESCE(max(seq), 0) FROM audit_events WHERE tenant_id = $1::uuid", tenant_id
    )
    return int(seq)


async def batch_end(conn: asyncpg.Connection, tenant_id: str, after_seq: int, limit: int) -> int:
    """The seq that ends the next batch of at most ``limit`` events (``after_seq`` if none)."""
    seq = await conn.fetchval(
        """SELECT max(seq) FROM (SELECT seq FROM audit_events
                                  WHERE tenant_id = $1::uuid AND seq > $2
                                  ORDER BY seq LIMIT $3) b""",
        tenant_id,
        after_seq,
        limit,
    )
    return after_seq if seq is None else int(seq)


async def changed_memories(
    conn: asyncpg.Connection, v: Visibility, f: RowFilter, after_seq: int, upto_seq: int
) -> list[asyncpg.Record]:
    """For each event in (after_seq, upto_seq], each memory it touched as that event left
    it — only where that version passes the visibility predicate and the filter."""
    p = Params(v.tenant_id, after_seq, upto_seq)
    sql = f"""SELECT e.seq AS audit_seq, e.at AS changed_at, {memory_columns(v, p)}
              FROM audit_events e
              CROSS JOIN LATERAL unnest(e.memory_ids) WITH ORDINALITY AS u (memory_id, ord)
              CROSS JOIN LATERAL (
                  SELECT * FROM memories v
                  WHERE v.tenant_id = e.tenant_id AND v.memory_id = u.memory_id
                    AND v.recorded_at <= e.at
                  ORDER BY v.version DESC LIMIT 1) m
              WHERE e.tenant_id = $1::uuid AND e.seq > $2 AND e.seq <= $3
                AND {visibility_predicate(v, p)} AND {filter_predicate(f, p)}
              ORDER BY e.seq, u.ord"""
    return list(await conn.fetch(sql, *p.values))


async def changed_documents(
    conn: asyncpg.Connection,
    v: Visibility,
    collections: list[str],
    after_seq: int,
    upto_seq: int,
) -> list[asyncpg.Record]:
    """For each event in (after_seq, upto_seq] about knowledge documents, each document it
    touched as that event left it (the version recorded by then), with the event's
    ``outcome`` — only where that row passes the visibility predicate (a document's rows
    all carry its scope and labels) and is in ``collections`` (all when empty)."""
    p = Params(v.tenant_id, after_seq, upto_seq)
    where = [object_visibility(v, p, "d")]
    if collections:
        where.append(f"d.collection = ANY({p.add(collections)}::text[])")
    sql = f"""SELECT e.seq AS audit_seq, e.at AS changed_at, e.outcome AS event_outcome,
                     {DOCUMENT_COLUMNS}
              FROM audit_events e
              CROSS JOIN LATERAL unnest(e.memory_ids) WITH ORDINALITY AS u (document_id, ord)
              CROSS JOIN LATERAL (
                  SELECT * FROM documents r
                  WHERE r.tenant_id = e.tenant_id AND r.document_id = u.document_id
                    AND r.recorded_at <= e.at
                  ORDER BY r.version DESC LIMIT 1) d
              WHERE e.tenant_id = $1::uuid AND e.seq > $2 AND e.seq <= $3
                AND e.outcome LIKE '%document.%' AND {" AND ".join(where)}
              ORDER BY e.seq, u.ord"""
    return list(await conn.fetch(sql, *p.values))


# --- owner side (brain-admin) ---------------------------------------------------------


async def tenants(conn: asyncpg.Connection, name: str | None) -> list[asyncpg.Record]:
    """Tenants with their recorded head, all or the one named."""
    return list(
        await conn.fetch(
            """SELECT t.tenant_id, t.name, h.seq AS head_seq, h.hash AS head_hash
               FROM tenants t LEFT JOIN audit_heads h USING (tenant_id)
               WHERE $1::text IS NULL OR t.name = $1 ORDER BY t.name""",
            name,
        )
    )


async def chain(
    conn: asyncpg.Connection, tenant_id: uuid.UUID, page: int = 1000
) -> AsyncIterator[asyncpg.Record]:
    """Every event of a tenant in seq order, read in pages."""
    after = 0
    while True:
        rows = await conn.fetch(
            f"""SELECT {EVENT_COLUMNS} FROM audit_events
                WHERE tenant_id = $1 AND seq > $2 ORDER BY seq LIMIT $3""",
            tenant_id,
            after,
            page,
        )
        for row in rows:
            yield row
        if len(rows) < page:
            return
        after = rows[-1]["seq"]


async def set_principal(conn: asyncpg.Connection, principal: str) -> None:
    """Name the actor of this session's writes for the audit triggers."""
    await conn.execute("SELECT set_config('brain.principal', $1, false)", principal)
