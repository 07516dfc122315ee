"""SQL for memory rows. Every statement embeds the visibility predicate."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from .visibility import Params, Visibility, visibility_predicate

MEMORY_COLUMNS = """m.tenant_id, m.memory_id, m.version, m.namespace, m.user_id, m.session_id,
    m.content, m.kind, m.tags, m.metadata, m.labels, m.status, m.confidence, m.importance,
    m.valid_from, m.valid_to, m.recorded_at, m.retired_at, m.expires_at, m.created_by,
    m.changed_by, m.change, m.reviewed_by, m.reviewed_at, m.review_reason, m.proposal_reason,
    m.candidate_expires_at, m.supersedes, m.superseded_by,
    (m.embedding IS NOT NULL) AS has_embedding"""


@dataclass(frozen=True, slots=True)
class TimeCoords:
    """Bitemporal read coordinates; None as_of = now (current versions)."""

    as_of: datetime | None = None
    valid_at: datetime | None = None
    any_valid_time: bool = False


@dataclass(frozen=True, slots=True)
class RowFilter:
    statuses: Sequence[str] = ("active",)
    kinds: Sequence[str] = ()
    tags: Sequence[str] = ()
    labels: Sequence[str] = ()
    namespaces: Sequence[str] = ()
    user_id: str = ""
    session_id: str = ""
    created_by: str = ""
    min_importance: float | None = None
    hide_expired: bool = True


@dataclass(slots=True)
class NewMemory:
    namespace: str
    user_id: str
    session_id: str
    content: str
    fingerprint: bytes
    kind: str
    tags: list[str]
    metadata: dict[str, str]
    labels: list[str]
    status: str
    confidence: float
    importance: float
    valid_from: datetime
    valid_to: datetime | None
    expires_at: datetime | None
    created_by: str
    changed_by_key: str
    change: str
    supersedes: list[uuid.UUID] = field(default_factory=list)
    embedding: Any = None
    embedding_model: str | None = None


def time_predicate(t: TimeCoords, p: Params, alias: str = "m") -> str:
    """Transaction-time (as_of) and valid-time (valid_at) restriction."""
    a = alias
    if t.as_of is None:
        clauses = [f"{a}.retired_at IS NULL"]
    else:
        at = p.add(t.as_of)
        clauses = [f"{a}.recorded_at <= {at}", f"({a}.retired_at IS NULL OR {a}.retired_at > {at})"]
    if not t.any_valid_time:
        va = p.add(t.valid_at) if t.valid_at is not None else "now()"
        clauses.append(f"{a}.valid_from <= {va} AND ({a}.valid_to IS NULL OR {a}.valid_to > {va})")
    return " AND ".join(clauses)


def filter_predicate(f: RowFilter, p: Params, alias: str = "m") -> str:
    """Status, expiry and the caller's narrowing filters."""
    a = alias
    clauses = [f"{a}.status = ANY({p.add(list(f.statuses))}::text[])"]
    if f.hide_expired:
        clauses.append(f"({a}.expires_at IS NULL OR {a}.expires_at > now())")
    if f.kinds:
        clauses.append(f"{a}.kind = ANY({p.add(list(f.kinds))}::text[])")
    if f.tags:
        clauses.append(f"{a}.tags @> {p.add(list(f.tags))}::text[]")
    if f.labels:
        clauses.append(f"{a}.labels && {p.add(list(f.labels))}::text[]")
    if f.namespaces:
        clauses.append(f"{a}.namespace = ANY({p.add(list(f.namespaces))}::text[])")
    if f.user_id:
        clauses.append(f"{a}.user_id IN ('', {p.add(f.user_id)})")
    if f.session_id:
        clauses.append(f"{a}.session_id IN ('', {p.add(f.session_id)})")
    if f.created_by:
        clauses.append(f"{a}.created_by = {p.add(f.created_by)}")
    if f.min_importance is not None:
        clauses.append(f"{a}.importance >= {p.add(f.min_importance)}")
    return " AND ".join(clauses)


async def insert_memory(conn: asyncpg.Connection, tenant_id: str, m: NewMemory) -> asyncpg.Record:
    """Insert version 1 of a new memory and return it."""
    row = await conn.fetchrow(
        f"""INSERT INTO memories AS m (
                tenant_id, memory_id, version, namespace, user_id, session_id, content,
                fingerprint, kind, tags, metadata, labels, status, confidence, importance,
                valid_from, valid_to, expires_at, created_by, changed_by, changed_by_key,
                change, supersedes, embedding, embedding_model)
            VALUES ($1::uuid, $2, 1, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
                    $15, $16, $17, $18, $18, $19, $20, $21, $22, $23)
            RETURNING {MEMORY_COLUMNS}""",
        tenant_id,
        uuid.uuid4(),
        m.namespace,
        m.user_id,
        m.session_id,
        m.content,
        m.fingerprint,
        m.kind,
        m.tags,
        m.metadata,
        m.labels,
        m.status,
        m.confidence,
        m.importance,
        m.valid_from,
        m.valid_to,
        m.expires_at,
        m.created_by,
        m.changed_by_key,
        m.change,
        m.supersedes,
        m.embedding,
        m.embedding_model,
    )
    assert row is not None
    return row


async def get_memory(
    conn: asyncpg.Connection, v: Visibility, memory_id: uuid.UUID, t: TimeCoords
) -> asyncpg.Record | None:
    """The version of ``memory_id`` current at ``t.as_of``, if visible."""
    p = Params(memory_id)
    sql = f"""SELECT {MEMORY_COLUMNS} FROM memories m
              WHERE m.memory_id = $1 AND {visibility_predicate(v, p)} AND {time_predicate(t, p)}"""
    return await conn.fetchrow(sql, *p.values)


async def search_lexical(
    conn: asyncpg.Connection,
    v: Visibility,
    query: str,
    limit: int,
    f: RowFilter,
    t: TimeCoords,
) -> list[asyncpg.Record]:
    """Full-text lane: every predicate applies before the LIMIT."""
    p = Params(query)
    sql = f"""SELECT {MEMORY_COLUMNS}, ts_rank_cd(m.search_tsv, q) AS lexical_score
              FROM memories m, websearch_to_tsquery('english', $1) q
              WHERE m.search_tsv @@ q
                AND {visibility_predicate(v, p)} AND {time_predicate(t, p)}
                AND {filter_predicate(f, p)}
              ORDER BY lexical_score DESC, m.recorded_at DESC, m.memory_id
              LIMIT {p.add(limit)}"""
    return list(await conn.fetch(sql, *p.values))
