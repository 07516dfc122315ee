"""SQL for the audit log. Events are written only by triggers (migration 0003).

The app role reads its own tenant's events (RLS plus an explicit tenant filter);
brain-admin, as the owner, reads every tenant's chain to verify it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from brain.server.storage.knowledge import DOCUMENT_COLUMNS
from brain.server.storage.memories import RowFilter, filter_predicate, memory_columns
from brain.server.storage.visibility import (
    Params,
    Visibility,
    audit_cell_predicate,
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


def event_page_statement(
    tenant_id: str, q: EventQuery, v: Visibility | None, tenant_wide: bool
) -> tuple[str, list[Any]]:
    """The statement ``list_events`` runs, and its parameters (tests EXPLAIN it)."""
    p = Params(tenant_id, q.after_seq)
    if v is None:  # the whole chain: every event of the tenant is the caller's to see
        clauses = ["tenant_id = $1::uuid", "seq > $2"]
        if q.memory_id is not None:
            clauses.append(f"memory_ids @> ARRAY[{p.add(q.memory_id)}::uuid]")
        if q.principal:  # the index by principal is partial on principal <> ''
            clauses.append(f"principal = {p.add(q.principal)} AND principal <> ''")
        if q.since is not None:
            clauses.append(f"at >= {p.add(q.since)}")
        sql = f"""SELECT {EVENT_COLUMNS} FROM audit_events
                  WHERE {" AND ".join(clauses)} ORDER BY seq LIMIT {p.add(q.limit)}"""
        return sql, p.values
    # The ids name memories or knowledge documents (migration 0020): each must be visible.
    # Each id is looked up alone (a LIMIT keeps the predicate out of the lookup, and scalar
    # subqueries are never turned into joins), then the predicate is tested on that row:
    # given the predicate, the planner could read the caller's whole bucket for each id,
    # hidden rows included, and the work would count them.
    memory = """SELECT m0.tenant_id, m0.memory_id, m0.namespace, m0.user_id, m0.session_id,
                       m0.labels, m0.status, m0.created_by, m0.retired_at
                FROM memories m0 WHERE m0.tenant_id = $1::uuid AND m0.memory_id = u.id
                  AND m0.retired_at IS NULL LIMIT 1"""
    document = """SELECT d0.tenant_id, d0.namespace, d0.user_id, d0.session_id, d0.labels
                  FROM documents d0 WHERE d0.tenant_id = $1::uuid AND d0.document_id = u.id
                    AND d0.retired_at IS NULL LIMIT 1"""
    tests = [
        f"""(SELECT COALESCE(bool_and(
                COALESCE((SELECT {visibility_predicate(v, p)} FROM ({memory}) m), FALSE)
                OR COALESCE((SELECT {object_visibility(v, p, "d")} FROM ({document}) d),
                            FALSE)), TRUE)
            FROM unnest(ev.memory_ids) AS u (id))"""
    ]
    if q.principal:
        tests.append(f"ev.principal = {p.add(q.principal)}")
    if q.since is not None:
        tests.append(f"ev.at >= {p.add(q.since)}")
    walk = _cell_walk(
        v,
        p,
        limit=p.add(q.limit),
        tenant_events=tenant_wide,
        object_id=None if q.memory_id is None else p.add(q.memory_id),
        event_test=" AND ".join(tests),
    )
    # Each event found is then read by its key (LIMIT keeps the lateral from becoming a
    # join the planner could turn around into a scan of the tenant's log).
    sql = f"""SELECT e.* FROM ({walk}) s
              CROSS JOIN LATERAL (
                  SELECT {EVENT_COLUMNS} FROM audit_events
                  WHERE tenant_id = $1::uuid AND seq = s.seq LIMIT 1) e
              ORDER BY s.seq"""
    return sql, p.values


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
    names (a memory's bucket never changes, so the ids say what it covers; labels and
    proposals bind as on every read). Tenant events (keys, policies), which name no
    memory, only when ``tenant_wide`` (a key confined to nothing). Such a caller's page is
    found by walking only the cells it may see (``_cell_walk``), never a hidden event.
    """
    sql, values = event_page_statement(tenant_id, q, v, tenant_wide)
    return list(await conn.fetch(sql, *values))


def _cell_walk(
    v: Visibility,
    p: Params,
    *,
    limit: str,
    tenant_events: bool,
    upto: str | None = None,
    object_id: str | None = None,
    event_test: str = "",
) -> str:
    """SQL of the first ``limit`` seqs after ``$2`` (and up to ``upto``) of events filed
    under a cell ``v`` may see (migration 0055), that name ``object_id`` if given and pass
    ``event_test`` over the event ``ev``.

    Each visible cell is read on its index from the cursor, at most ``limit`` events, so
    the rows walked are the visible cells' and never a hidden event's: the work does not
    grow with what the caller cannot see. Tenant events (the 'tenant' cell) only with
    ``tenant_events``; the 'unreadable' cell never."""
    cells = f"(c.kind = 'object' AND {audit_cell_predicate(v, p, 'c')})"
    if tenant_events:
        cells = f"({cells} OR c.kind = 'tenant')"
    where = ["i.tenant_id = $1::uuid", "i.cell_id = c.cell_id", "i.seq > $2"]
    if upto is not None:
        where.append(f"i.seq <= {upto}")
    if object_id is not None:
        where.append(f"i.object_id = {object_id}::uuid")
    if event_test:
        # A scalar subquery, evaluated for each filed row by its key, never a join.
        where.append(
            f"""(SELECT {event_test} FROM audit_events ev
                 WHERE ev.tenant_id = $1::uuid AND ev.seq = i.seq LIMIT 1)"""
        )
    return f"""SELECT DISTINCT w.seq FROM audit_cells c
               CROSS JOIN LATERAL (
                   SELECT DISTINCT i.seq FROM audit_cell_events i
                   WHERE {" AND ".join(where)}
                   ORDER BY i.seq LIMIT {limit}) w
               WHERE c.tenant_id = $1::uuid AND {cells}
               ORDER BY w.seq LIMIT {limit}"""


async def head_seq(conn: asyncpg.Connection, tenant_id: str) -> int:
    """The newest event's seq in this tenant, 0 when there is none."""
    seq = await conn.fetchval(
        "SELECT COALESCE(max(seq), 0) FROM audit_events WHERE tenant_id = $1::uuid", tenant_id
    )
    return int(seq)


def watch_batch_statement(
    v: Visibility, after_seq: int, upto_seq: int, limit: int
) -> tuple[str, list[Any]]:
    """The statement ``watch_batch`` runs, and its parameters (tests EXPLAIN it)."""
    p = Params(v.tenant_id, after_seq)
    walk = _cell_walk(v, p, limit=p.add(limit), tenant_events=False, upto=p.add(upto_seq))
    return walk, p.values


async def watch_batch(
    conn: asyncpg.Connection, v: Visibility, after_seq: int, upto_seq: int, limit: int
) -> list[int]:
    """The seqs of the next at most ``limit`` events in (after_seq, upto_seq] that name a
    memory ``v`` may see, found on the cells it may see only."""
    sql, values = watch_batch_statement(v, after_seq, upto_seq, limit)
    return [int(r["seq"]) for r in await conn.fetch(sql, *values)]


def changed_memories_statement(
    v: Visibility, f: RowFilter, seqs: list[int]
) -> tuple[str, list[Any]]:
    """The statement ``changed_memories`` runs, and its parameters (tests EXPLAIN it)."""
    p = Params(v.tenant_id, seqs)
    sql = f"""SELECT e.seq AS audit_seq, e.at AS changed_at, {memory_columns(v, p)}
              FROM unnest($2::bigint[]) AS s (seq)
              CROSS JOIN LATERAL (
                  SELECT * FROM audit_events
                  WHERE tenant_id = $1::uuid AND seq = s.seq LIMIT 1) e
              CROSS JOIN LATERAL unnest(e.memory_ids) WITH ORDINALITY AS u (memory_id, ord)
              CROSS JOIN LATERAL (
                  SELECT * FROM memories v
                  WHERE v.tenant_id = $1::uuid AND v.memory_id = u.memory_id
                    AND v.recorded_at <= e.at
                  ORDER BY v.version DESC LIMIT 1) m
              WHERE {visibility_predicate(v, p)} AND {filter_predicate(f, p)}
              ORDER BY e.seq, u.ord"""
    return sql, p.values


async def changed_memories(
    conn: asyncpg.Connection, v: Visibility, f: RowFilter, seqs: list[int]
) -> list[asyncpg.Record]:
    """For each of these events (``watch_batch``), each memory it touched as that event
    left it — only where that version passes the visibility predicate and the filter."""
    sql, values = changed_memories_statement(v, f, seqs)
    return list(await conn.fetch(sql, *values))


def changed_documents_statement(
    v: Visibility, collections: list[str], seqs: list[int]
) -> tuple[str, list[Any]]:
    """The statement ``changed_documents`` runs, and its parameters."""
    p = Params(v.tenant_id, seqs)
    where = [object_visibility(v, p, "d")]
    if collections:
        where.append(f"d.collection = ANY({p.add(collections)}::text[])")
    sql = f"""SELECT e.seq AS audit_seq, e.at AS changed_at, e.outcome AS event_outcome,
                     {DOCUMENT_COLUMNS}
              FROM unnest($2::bigint[]) AS s (seq)
              CROSS JOIN LATERAL (
                  SELECT * FROM audit_events
                  WHERE tenant_id = $1::uuid AND seq = s.seq LIMIT 1) e
              CROSS JOIN LATERAL unnest(e.memory_ids) WITH ORDINALITY AS u (document_id, ord)
              CROSS JOIN LATERAL (
                  SELECT * FROM documents r
                  WHERE r.tenant_id = $1::uuid AND r.document_id = u.document_id
                    AND r.recorded_at <= e.at
                  ORDER BY r.version DESC LIMIT 1) d
              WHERE e.outcome LIKE '%document.%' AND {" AND ".join(where)}
              ORDER BY e.seq, u.ord"""
    return sql, p.values


async def changed_documents(
    conn: asyncpg.Connection, v: Visibility, collections: list[str], seqs: list[int]
) -> list[asyncpg.Record]:
    """For each of these events (``watch_batch``) about knowledge documents, each document
    it touched as that event left it (the version recorded by then), with the event's
    ``outcome`` — only where that row passes the visibility predicate (a document's rows
    all carry its scope and labels) and is in ``collections`` (all when empty)."""
    sql, values = changed_documents_statement(v, collections, seqs)
    return list(await conn.fetch(sql, *values))


# --- owner side (brain-admin) ---------------------------------------------------------


async def tenants(conn: asyncpg.Connection, name: str | None) -> list[dict[str, Any]]:
    """Tenants with their recorded head, all or the one named.

    Each head is read by its tenant (one shard on Citus), not by `tenants LEFT JOIN
    audit_heads`: in one make test-citus run `audit verify` printed no line for a tenant
    just isolated to shards of its own, and that outer join of a reference table with a
    distributed one is the suspect."""
    out = []
    for t in await conn.fetch(
        "SELECT tenant_id, name FROM tenants WHERE $1::text IS NULL OR name = $1 ORDER BY name",
        name,
    ):
        head = await conn.fetchrow(
            "SELECT seq, hash FROM audit_heads WHERE tenant_id = $1", t["tenant_id"]
        )
        out.append(
            {
                "tenant_id": t["tenant_id"],
                "name": t["name"],
                "head_seq": head["seq"] if head else None,
                "head_hash": head["hash"] if head else None,
            }
        )
    return out


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
