"""SQL for conflicts between memories (issue 30; migration 0037).

A conflict row is a side record of both memories it joins: every statement that reads one
embeds the visibility predicate for each of them, so a conflict with a memory the caller
cannot see is not there at all (row-level security says the same with
``brain_key_may_see_head``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from brain.server.storage import retrieval, setlocal
from brain.server.storage.visibility import (
    Params,
    Visibility,
    visibility_predicate,
    write_predicate,
)

# What the detectors and the wall read of a memory that may conflict.
PEER_COLUMNS = """m.tenant_id, m.memory_id, m.namespace, m.user_id, m.session_id, m.content,
    m.labels, m.valid_from, m.valid_to, m.recorded_at, m.expires_at, m.created_by"""
CONFLICT_COLUMNS = """c.conflict_id, c.namespace, c.newer_id, c.older_id, c.rule, c.state,
    c.overlap, c.semantic, c.detail, c.judge, c.detected_by, c.detected_at, c.resolved_by,
    c.resolved_at, c.resolve_reason"""
# How many visible memories a write is compared with: the best lexical matches on its
# words and values, and its nearest neighbours by embedding.
LEXICAL_PEERS = 24
SEMANTIC_PEERS = 8
# A term in more of the compared rows than this is too common to find peers by (`peers`),
# and at most this many of the rarest terms are probed.
TERM_CAP = 64
MAX_TERMS = 8


@dataclass(frozen=True, slots=True)
class NewConflict:
    tenant_id: Any
    namespace: str
    newer_id: uuid.UUID
    older_id: uuid.UUID
    rule: str
    state: str
    overlap: float
    semantic: float
    detail: str
    detected_by: str
    at: datetime


def _both_visible(v: Visibility, p: Params, alias: str = "c") -> str:
    """Both memories of conflict ``alias`` pass the visibility predicate now."""
    pinned = v.app_filter or v.tenant_pin
    tenant = f"{p.add(v.tenant_id)}::uuid" if pinned else f"{alias}.tenant_id"
    return " AND ".join(
        f"EXISTS (SELECT 1 FROM memories {m} WHERE {m}.tenant_id = {tenant} "
        f"AND {m}.memory_id = {alias}.{column} AND {m}.retired_at IS NULL "
        f"AND {visibility_predicate(v, p, m)})"
        for m, column in (("cn", "newer_id"), ("co", "older_id"))
    )


async def peers(
    conn: asyncpg.Connection,
    v: Visibility,
    namespace: str,
    memory_id: uuid.UUID,
    content: str,
    vector: Sequence[float] | None,
    model: str | None,
) -> list[asyncpg.Record]:
    """The ACTIVE memories of ``namespace`` that ``v`` sees and that share a rare term with
    the written memory ``memory_id`` or lie nearest to its embedding; ``cosine`` is 0
    without embeddings.

    Rare means held by at most ``TERM_CAP`` of the rows ``v`` sees, read from the per-cell
    term statistics the lexical lanes keep (exact-form lexemes, content words only), so a
    write costs a few index probes however large the namespace grows; a statement made
    only of common words is found by its embedding."""
    stats = await retrieval.term_statistics(conn, v, content, configs=("simple",))
    rare = sorted((r["df"], r["lexeme"]) for r in stats if r["lexeme"] and 1 < r["df"] <= TERM_CAP)[
        :MAX_TERMS
    ]
    p = Params(namespace, memory_id, v.tenant_id)
    vis = visibility_predicate(v, p)
    power = write_predicate(v, p)
    # The tenant named outright: every index of memories leads with it.
    where = (
        f"m.tenant_id = $3::uuid AND m.namespace = $1 AND m.memory_id <> $2 "
        f"AND m.retired_at IS NULL AND m.status = 'active' "
        f"AND (m.expires_at IS NULL OR m.expires_at > now()) AND {vis}"
    )
    branches = []
    if rare:
        lexemes, weights = p.add([t for _, t in rare]), p.add([1.0 / df for df, _ in rare])
        branches.append(
            f"""(WITH t AS MATERIALIZED (
                     SELECT quote_literal(u.lexeme)::tsquery AS tq, u.weight
                     FROM unnest({lexemes}::text[], {weights}::float8[]) AS u (lexeme, weight))
                 SELECT h.memory_id
                 FROM t, LATERAL (SELECT m.memory_id FROM memories m
                                  WHERE m.search_tsv_simple @@ t.tq AND {where}) h
                 GROUP BY h.memory_id
                 ORDER BY sum(t.weight) DESC, h.memory_id
                 LIMIT {LEXICAL_PEERS})"""
        )
    cosine = "0::float8"
    if vector is not None and model is not None:
        values = vector.to_list() if hasattr(vector, "to_list") else list(vector)
        vec, mod = p.add(values), p.add(model)
        cosine = (
            f"CASE WHEN m.embedding IS NOT NULL AND m.embedding_model = {mod} "
            f"THEN 1 - (m.embedding <=> {vec}::vector) ELSE 0 END"
        )
        branches.append(
            f"""(SELECT m.memory_id FROM memories m
                 WHERE {where} AND m.embedding IS NOT NULL AND m.embedding_model = {mod}
                 ORDER BY m.embedding <=> {vec}::vector
                 LIMIT {SEMANTIC_PEERS})"""
        )
    if not branches:
        return []
    return list(
        await conn.fetch(
            f"""SELECT {PEER_COLUMNS}, {cosine} AS cosine, {power} AS writable
                FROM memories m
                WHERE m.memory_id IN ({" UNION ".join(branches)}) AND {where}
                ORDER BY m.recorded_at, m.memory_id""",
            *p.values,
        )
    )


async def slot_peers(
    conn: asyncpg.Connection, v: Visibility, memory_id: uuid.UUID
) -> list[asyncpg.Record]:
    """Visible ACTIVE memories asserting a single-valued relation of the same subject and
    predicate as one ``memory_id`` asserts, with another object and an overlapping valid
    time (or one this memory's relation already closed).

    Read by keys from the memory's own relations on, as `graph.close_predecessors` does
    (see "Keyed lookups" there): the cost follows the subject's facts, not the tenant."""
    p = Params(memory_id, v.tenant_id)
    vis = visibility_predicate(v, p)
    power = write_predicate(v, p)
    return list(
        await conn.fetch(
            f"""WITH n AS MATERIALIZED (
                    SELECT n.subject_id, n.predicate, n.object_id, n.valid_from, n.valid_to
                    FROM graph_relations n
                    WHERE n.tenant_id = $2::uuid AND n.memory_id = $1
                      AND n.cardinality = 'one' AND n.retired_at IS NULL AND NOT n.pending),
                hit AS MATERIALIZED (
                    SELECT n.subject_id, n.predicate, n.object_id AS new_object_id,
                           o.object_id AS old_object_id, o.memory_id
                    FROM n CROSS JOIN LATERAL (
                        SELECT o.object_id, o.memory_id FROM graph_relations o
                        WHERE o.tenant_id = $2::uuid AND o.subject_id = n.subject_id
                          AND o.predicate = n.predicate AND o.object_id <> n.object_id
                          AND o.memory_id <> $1 AND o.retired_at IS NULL AND NOT o.pending
                          AND (o.closed_by = $1
                               OR ((o.valid_to IS NULL OR o.valid_to > n.valid_from)
                                   AND (n.valid_to IS NULL OR n.valid_to > o.valid_from)))
                        OFFSET 0) o)
                SELECT DISTINCT ON (m.memory_id) {PEER_COLUMNS}, 0::float8 AS cosine,
                       {power} AS writable, h.predicate, se.name_norm AS subject,
                       oe.name_norm AS old_object, ne.name_norm AS new_object
                FROM hit h
                CROSS JOIN LATERAL (
                    SELECT m.* FROM memories m
                    WHERE m.tenant_id = $2::uuid AND m.memory_id = h.memory_id
                      AND m.retired_at IS NULL
                    OFFSET 0) m
                CROSS JOIN LATERAL (
                    SELECT e.name_norm FROM graph_entities e
                    WHERE e.tenant_id = $2::uuid AND e.entity_id = h.subject_id OFFSET 0) se
                CROSS JOIN LATERAL (
                    SELECT e.name_norm FROM graph_entities e
                    WHERE e.tenant_id = $2::uuid AND e.entity_id = h.old_object_id OFFSET 0) oe
                CROSS JOIN LATERAL (
                    SELECT e.name_norm FROM graph_entities e
                    WHERE e.tenant_id = $2::uuid AND e.entity_id = h.new_object_id OFFSET 0) ne
                WHERE m.status = 'active' AND {vis}
                ORDER BY m.memory_id, h.predicate, h.subject_id, h.old_object_id""",
            *p.values,
        )
    )


async def record(conn: asyncpg.Connection, c: NewConflict) -> asyncpg.Record | None:
    """Insert the conflict, or return the pair's existing row (a dismissed pair stays
    dismissed: it is never proposed again). None when the pair is recorded the other way."""
    row = await conn.fetchrow(
        f"""INSERT INTO memory_conflicts AS c (tenant_id, conflict_id, namespace, newer_id,
                   older_id, rule, state, overlap, semantic, detail, detected_by, detected_at)
            VALUES ($1, gen_random_uuid(), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
            ON CONFLICT (tenant_id, older_id, newer_id) DO NOTHING
            RETURNING {CONFLICT_COLUMNS}""",
        c.tenant_id, c.namespace, c.newer_id, c.older_id, c.rule, c.state, c.overlap,
        c.semantic, c.detail, c.detected_by, c.at,
    )  # fmt: skip
    if row is not None:
        return row
    return await conn.fetchrow(
        f"""SELECT {CONFLICT_COLUMNS} FROM memory_conflicts c
            WHERE c.tenant_id = $1 AND c.older_id = $2 AND c.newer_id = $3""",
        c.tenant_id,
        c.older_id,
        c.newer_id,
    )


async def existing(
    conn: asyncpg.Connection, tenant_id: Any, a: uuid.UUID, b: uuid.UUID
) -> asyncpg.Record | None:
    """The conflict row of the pair, whichever way round it was recorded."""
    return await conn.fetchrow(
        f"""SELECT {CONFLICT_COLUMNS} FROM memory_conflicts c
            WHERE c.tenant_id = $1 AND ((c.older_id = $2 AND c.newer_id = $3)
                                        OR (c.older_id = $3 AND c.newer_id = $2))""",
        tenant_id,
        a,
        b,
    )


async def recorded_pairs(
    conn: asyncpg.Connection, tenant_id: Any, memory_id: uuid.UUID
) -> set[tuple[uuid.UUID, uuid.UUID]]:
    """(older, newer) of every conflict row that involves ``memory_id``."""
    rows = await conn.fetch(
        "SELECT older_id, newer_id FROM memory_conflicts "
        "WHERE tenant_id = $1 AND (older_id = $2 OR newer_id = $2)",
        tenant_id,
        memory_id,
    )
    return {(r["older_id"], r["newer_id"]) for r in rows}


async def erase(conn: asyncpg.Connection, tenant_id: Any, memory_id: uuid.UUID) -> None:
    """Forget: no conflict row of the memory remains (they quote its values)."""
    await conn.execute(
        "DELETE FROM memory_conflicts WHERE tenant_id = $1 AND (newer_id = $2 OR older_id = $2)",
        tenant_id,
        memory_id,
    )


async def close_open(conn: asyncpg.Connection, tenant_id: Any, memory_id: uuid.UUID) -> None:
    """The memory's content changed or it left ACTIVE: its open conflicts no longer hold
    (a later write is compared anew)."""
    await conn.execute(
        "DELETE FROM memory_conflicts WHERE tenant_id = $1 AND state = 'open' "
        "AND (newer_id = $2 OR older_id = $2)",
        tenant_id,
        memory_id,
    )


async def page(
    conn: asyncpg.Connection,
    v: Visibility,
    states: Sequence[str],
    memory_id: uuid.UUID | None,
    before: uuid.UUID | None,
    size: int,
) -> list[asyncpg.Record]:
    """Conflicts between memories ``v`` sees, newest first (conflict ids are UUIDv7)."""
    p = Params(list(states))
    clauses = ["c.state = ANY($1::text[])", _both_visible(v, p)]
    if memory_id is not None:
        m = p.add(memory_id)
        clauses.append(f"(c.newer_id = {m} OR c.older_id = {m})")
    if before is not None:
        clauses.append(f"c.conflict_id < {p.add(before)}")
    return list(
        await conn.fetch(
            f"""SELECT {CONFLICT_COLUMNS} FROM memory_conflicts c
                WHERE {" AND ".join(clauses)}
                ORDER BY c.conflict_id DESC LIMIT {int(size)}""",
            *p.values,
        )
    )


async def lock(
    conn: asyncpg.Connection, v: Visibility, conflict_id: uuid.UUID
) -> asyncpg.Record | None:
    """A conflict between memories ``v`` sees, locked for a decision."""
    p = Params(conflict_id)
    return await conn.fetchrow(
        f"""SELECT c.tenant_id, {CONFLICT_COLUMNS} FROM memory_conflicts c
            WHERE c.conflict_id = $1 AND {_both_visible(v, p)}
            FOR UPDATE""",
        *p.values,
    )


async def decide(
    conn: asyncpg.Connection, row: asyncpg.Record, state: str, by: str, at: datetime, reason: str
) -> asyncpg.Record:
    out = await conn.fetchrow(
        f"""UPDATE memory_conflicts c SET state = $3, resolved_by = $4, resolved_at = $5,
                   resolve_reason = $6
            WHERE c.tenant_id = $1 AND c.conflict_id = $2
            RETURNING {CONFLICT_COLUMNS}""",
        row["tenant_id"], row["conflict_id"], state, by, at, reason,
    )  # fmt: skip
    assert out is not None
    return out


async def set_verdict(
    conn: asyncpg.Connection, v: Visibility, conflict_id: uuid.UUID, verdict: str
) -> None:
    """A model judge's advice on a conflict that is still open (it decides nothing)."""
    p = Params(conflict_id, verdict)
    await conn.execute(
        f"""UPDATE memory_conflicts c SET judge = $2
            WHERE c.conflict_id = $1 AND c.state = 'open' AND {_both_visible(v, p)}""",
        *p.values,
    )


async def open_marks(
    conn: asyncpg.Connection, v: Visibility, memory_ids: Sequence[uuid.UUID]
) -> list[asyncpg.Record]:
    """Open conflicts of these memories with memories ``v`` sees (for marks on hits), but
    those a model judge rejected."""
    if not memory_ids:
        return []
    p = Params(list(memory_ids))
    return list(
        await conn.fetch(
            f"""SELECT {CONFLICT_COLUMNS} FROM memory_conflicts c
                WHERE c.state = 'open' AND c.judge NOT LIKE 'rejected%'
                  AND (c.newer_id = ANY($1::uuid[])
                                            OR c.older_id = ANY($1::uuid[]))
                  AND {_both_visible(v, p)}
                ORDER BY c.conflict_id""",
            *p.values,
        )
    )


async def embedding_of(
    conn: asyncpg.Connection, tenant_id: Any, memory_id: uuid.UUID
) -> tuple[Any, str | None]:
    """The current version's vector and its model (None, None without one)."""
    row = await conn.fetchrow(
        "SELECT embedding, embedding_model FROM memories "
        "WHERE tenant_id = $1 AND memory_id = $2 AND retired_at IS NULL",
        tenant_id,
        memory_id,
    )
    if row is None or row["embedding"] is None:
        return None, None
    return row["embedding"], row["embedding_model"]


async def namespace_policy(conn: asyncpg.Connection, namespace: str) -> str:
    """'off', 'propose' (no policy row) or 'supersede_own'."""
    value = await conn.fetchval(  # the tenant named: Citus routes by it (review.py)
        "SELECT conflicts FROM namespace_policies WHERE tenant_id = $1::uuid AND namespace = $2",
        await setlocal.current_tenant(conn),
        namespace,
    )
    return str(value or "propose")


async def reopen_superseded(
    conn: asyncpg.Connection, forgotten: uuid.UUID, at: datetime, by: str, key_id: str,
    ttl: timedelta,
) -> int:  # fmt: skip
    """Every memory ``forgotten`` had superseded becomes a candidate for review again."""
    return int(
        await conn.fetchval(
            "SELECT brain_reopen_superseded($1::uuid, $2, $3, $4, $5, $6)",
            await setlocal.current_tenant(conn),
            forgotten,
            at,
            by,
            key_id,
            ttl,
        )
    )
