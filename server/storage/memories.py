"""SQL for memory rows. Every statement embeds the visibility predicate."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from brain.server.storage.visibility import (
    Params,
    Visibility,
    visibility_predicate,
    visible_links,
    write_predicate,
)

_ROW_COLUMNS = """m.tenant_id, m.memory_id, m.version, m.namespace, m.user_id, m.session_id,
    m.content, m.kind, m.tags, m.metadata, m.labels, m.status, m.confidence, m.importance,
    m.valid_from, m.valid_to, m.recorded_at, m.retired_at, m.expires_at, m.created_by,
    m.changed_by, m.change, m.reviewed_by, m.reviewed_at, m.review_reason, m.proposal_reason,
    m.candidate_expires_at, (m.embedding IS NOT NULL) AS has_embedding"""
# Raw links: for the write path only (it appends to them); never shown to a caller as is.
MEMORY_COLUMNS = f"{_ROW_COLUMNS}, m.supersedes, m.superseded_by"


# What ranking reads of every search candidate: its key, and what fusion's features and
# boosts use. The columns shown (`memory_columns`) are read for the returned hits only.
# (``embedding_model``: whether the row has a vector the semantic lane compares.)
RANKING_NAMES = (
    "tenant_id", "memory_id", "version", "valid_from", "importance", "recorded_at",
    "embedding_model",
)  # fmt: skip


def ranking_of(alias: str) -> str:
    """`RANKING_NAMES` as columns of the row called ``alias``."""
    return ", ".join(f"{alias}.{name}" for name in RANKING_NAMES)


RANKING_COLUMNS = ranking_of("m")


def ranking_columns(v: Visibility, p: Params) -> str:
    return RANKING_COLUMNS


async def shown_rows(
    conn: asyncpg.Connection, v: Visibility, keys: Sequence[tuple[Any, Any, int]]
) -> dict[tuple[Any, Any, int], asyncpg.Record]:
    """The shown columns of the versions ``keys`` (tenant, memory id, version) that ``v``
    may see, by key."""
    if not keys:
        return {}
    tenants, ids, versions = (list(column) for column in zip(*keys, strict=True))
    p = Params(tenants, ids, versions)
    rows = await conn.fetch(
        f"""SELECT {memory_columns(v, p)} FROM memories m
            WHERE (m.tenant_id, m.memory_id, m.version) IN (
                      SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[]))
              AND {visibility_predicate(v, p)}""",
        *p.values,
    )
    return {(r["tenant_id"], r["memory_id"], r["version"]): r for r in rows}


def memory_columns(v: Visibility, p: Params) -> str:
    """The columns a caller is shown, with links cut to the memories it may see."""
    return (
        f"{_ROW_COLUMNS}, {visible_links(v, p, 'supersedes')} AS supersedes, "
        f"{visible_links(v, p, 'superseded_by')} AS superseded_by"
    )


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
    proposal_reason: str | None = None
    candidate_expires_at: datetime | None = None

    def place(self) -> dict[str, Any]:
        """What decides who reads it: namespace, bucket and labels."""
        return {
            "namespace": self.namespace,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "labels": self.labels,
        }


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


async def insert_memory(
    conn: asyncpg.Connection, tenant_id: str, m: NewMemory, memory_id: uuid.UUID, at: datetime
) -> asyncpg.Record:
    """Insert version 1 of a new memory and return it."""
    row = await conn.fetchrow(
        f"""INSERT INTO memories AS m (
                tenant_id, memory_id, version, namespace, user_id, session_id, content,
                fingerprint, kind, tags, metadata, labels, status, confidence, importance,
                valid_from, valid_to, expires_at, created_by, changed_by, changed_by_key,
                change, supersedes, embedding, embedding_model, recorded_at, proposal_reason,
                candidate_expires_at)
            VALUES ($1::uuid, $2, 1, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
                    $15, $16, $17, $18, $18, $19, $20, $21, $22, $23, $24, $25, $26)
            RETURNING {MEMORY_COLUMNS}""",
        tenant_id,
        memory_id,
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
        at,
        m.proposal_reason,
        m.candidate_expires_at,
    )
    assert row is not None
    return row


async def get_memory(
    conn: asyncpg.Connection, v: Visibility, memory_id: uuid.UUID, t: TimeCoords
) -> asyncpg.Record | None:
    """The version of ``memory_id`` current at ``t.as_of``, if visible."""
    p = Params(memory_id)
    sql = f"""SELECT {memory_columns(v, p)} FROM memories m
              WHERE m.memory_id = $1 AND {visibility_predicate(v, p)} AND {time_predicate(t, p)}"""
    return await conn.fetchrow(sql, *p.values)


# Every column a version copies; search_tsv is generated from content.
VERSION_COLUMNS = (
    "tenant_id", "memory_id", "version", "namespace", "user_id", "session_id", "content",
    "fingerprint", "kind", "tags", "metadata", "labels", "status", "confidence", "importance",
    "valid_from", "valid_to", "recorded_at", "retired_at", "expires_at", "created_by",
    "changed_by", "changed_by_key", "change", "reviewed_by", "reviewed_at", "review_reason",
    "proposal_reason", "candidate_expires_at", "supersedes", "superseded_by", "embedding",
    "embedding_model",
)  # fmt: skip


async def current_places(
    conn: asyncpg.Connection, v: Visibility, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, asyncpg.Record]:
    """Where each visible memory of ``ids`` is, as it is now (not locked: its bucket never
    changes, and what may change is read again under the lock)."""
    p = Params(list(ids))
    rows = await conn.fetch(
        f"""SELECT m.memory_id, m.namespace, m.user_id, m.session_id, m.status, m.created_by
            FROM memories m
            WHERE m.memory_id = ANY($1::uuid[]) AND m.retired_at IS NULL
              AND {visibility_predicate(v, p)}""",
        *p.values,
    )
    return {row["memory_id"]: row for row in rows}


async def clock(conn: asyncpg.Connection) -> datetime:
    """Transaction time for the versions this transaction writes (read after locking)."""
    value: datetime = await conn.fetchval("SELECT clock_timestamp()")
    return value


async def lock_current(
    conn: asyncpg.Connection, v: Visibility, memory_id: uuid.UUID
) -> asyncpg.Record | None:
    """The current version of a visible memory, locked for a change until commit.

    Writers of one memory serialise on a transaction-scoped advisory lock keyed on the
    memory, not on a version row: a version row is retired by the writer ahead, so a
    waiter locking it would wake to find no current version and answer NOT_FOUND for a
    memory that exists. The lock is taken only for a memory the caller can see, and the
    current version is read after it is held, so it is the one the last writer left.
    ``writable`` says whether the caller may change it directly (``write_predicate``),
    decided in the same statement that finds and locks the row.
    """
    p = Params(memory_id)
    tenant_id = await conn.fetchval(
        f"""SELECT m.tenant_id FROM memories m
            WHERE m.memory_id = $1 AND m.retired_at IS NULL AND {visibility_predicate(v, p)}""",
        *p.values,
    )
    if tenant_id is None:
        return None
    await lock_memory(conn, tenant_id, memory_id)
    p = Params(memory_id)
    return await conn.fetchrow(
        f"""SELECT {MEMORY_COLUMNS}, m.fingerprint, {write_predicate(v, p)} AS writable
            FROM memories m
            WHERE m.memory_id = $1 AND m.retired_at IS NULL AND {visibility_predicate(v, p)}
            FOR UPDATE""",
        *p.values,
    )


async def lock_memory(conn: asyncpg.Connection, tenant_id: Any, memory_id: uuid.UUID) -> None:
    """Hold the memory's writer lock until this transaction ends."""
    key = f"memory\x1f{tenant_id}\x1f{memory_id}"
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)


async def new_version(
    conn: asyncpg.Connection,
    current: asyncpg.Record,
    at: datetime,
    changes: dict[str, Any],
    shown_to: Visibility | None = None,
) -> asyncpg.Record:
    """Close ``current`` at ``at`` and insert the next version with ``changes`` applied.

    The returned row's links are cut to what ``shown_to`` may see when it is given."""
    unknown = set(changes) - set(VERSION_COLUMNS)
    if unknown:
        raise ValueError(f"not memory columns: {sorted(unknown)}")
    await conn.execute(
        """UPDATE memories SET retired_at = $4
           WHERE tenant_id = $1 AND memory_id = $2 AND version = $3 AND retired_at IS NULL""",
        current["tenant_id"],
        current["memory_id"],
        current["version"],
        at,
    )
    overrides = {**changes, "version": current["version"] + 1, "recorded_at": at,
                 "retired_at": None}  # fmt: skip
    p = Params(current["tenant_id"], current["memory_id"], current["version"])
    select = ", ".join(p.add(overrides[c]) if c in overrides else f"m.{c}" for c in VERSION_COLUMNS)
    returning = MEMORY_COLUMNS if shown_to is None else memory_columns(shown_to, p)
    row = await conn.fetchrow(
        f"""INSERT INTO memories AS m ({", ".join(VERSION_COLUMNS)})
            SELECT {select} FROM memories m
            WHERE m.tenant_id = $1 AND m.memory_id = $2 AND m.version = $3
            RETURNING {returning}""",
        *p.values,
    )
    assert row is not None
    return row


# Columns an update derives from another it sets: they change exactly when that one does.
DERIVED_COLUMNS = frozenset({"fingerprint", "embedding", "embedding_model"})


async def unchanged(
    conn: asyncpg.Connection, v: Visibility, current: asyncpg.Record, changes: dict[str, Any]
) -> asyncpg.Record | None:
    """``current`` as ``v`` is shown it when each column ``changes`` sets already holds
    that value (compared by PostgreSQL, as stored: a real, an array, jsonb), else None."""
    p = Params(current["tenant_id"], current["memory_id"], current["version"])
    same = " AND ".join(
        f"m.{c} IS NOT DISTINCT FROM {p.add(value)}"
        for c, value in changes.items()
        if c not in DERIVED_COLUMNS
    )
    return await conn.fetchrow(
        f"""SELECT {memory_columns(v, p)} FROM memories m
            WHERE m.tenant_id = $1 AND m.memory_id = $2 AND m.version = $3
              AND m.retired_at IS NULL AND {visibility_predicate(v, p)} AND {same or "true"}""",
        *p.values,
    )


async def lock_value(conn: asyncpg.Connection, tenant_id: str, m: NewMemory) -> None:
    """Serialise writers of the same value in the same bucket until commit, so two
    concurrent identical saves cannot both miss each other's row."""
    key = "\x1f".join([tenant_id, m.namespace, m.user_id, m.session_id, m.fingerprint.hex()])
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)


async def find_duplicate(
    conn: asyncpg.Connection, v: Visibility, m: NewMemory
) -> asyncpg.Record | None:
    """A visible active memory with the same value for the same readers (bucket and
    labels): saving a value for another audience is a new memory."""
    p = Params(m.namespace, m.user_id, m.session_id, m.fingerprint, sorted(m.labels))
    return await conn.fetchrow(
        f"""SELECT {memory_columns(v, p)} FROM memories m
            WHERE m.namespace = $1 AND m.user_id = $2 AND m.session_id = $3
              AND m.fingerprint = $4 AND m.labels @> $5::text[] AND m.labels <@ $5::text[]
              AND m.status = 'active' AND m.retired_at IS NULL
              AND (m.expires_at IS NULL OR m.expires_at > now())
              AND {visibility_predicate(v, p)}
            ORDER BY m.memory_id LIMIT 1""",
        *p.values,
    )


async def history(
    conn: asyncpg.Connection, v: Visibility, memory_id: uuid.UUID
) -> list[asyncpg.Record]:
    p = Params(memory_id)
    return list(
        await conn.fetch(
            f"""SELECT {memory_columns(v, p)} FROM memories m
                WHERE m.memory_id = $1 AND {visibility_predicate(v, p)}
                ORDER BY m.version""",
            *p.values,
        )
    )


async def list_page(
    conn: asyncpg.Connection,
    v: Visibility,
    f: RowFilter,
    t: TimeCoords,
    after: uuid.UUID | None,
    limit: int,
) -> list[asyncpg.Record]:
    """One page, newest memory first; the cursor is the last memory id seen."""
    p = Params()
    cursor = f"AND m.memory_id < {p.add(after)}" if after is not None else ""
    return list(
        await conn.fetch(
            f"""SELECT {memory_columns(v, p)} FROM memories m
                WHERE {visibility_predicate(v, p)} AND {time_predicate(t, p)}
                  AND {filter_predicate(f, p)} {cursor}
                ORDER BY m.memory_id DESC
                LIMIT {p.add(limit)}""",
            *p.values,
        )
    )


async def export_page(
    conn: asyncpg.Connection,
    v: Visibility,
    f: RowFilter,
    include_history: bool,
    after: tuple[uuid.UUID, int] | None,
    limit: int,
) -> list[asyncpg.Record]:
    """Export order: memory id, then version; every status unless filtered."""
    p = Params()
    current = "" if include_history else "AND m.retired_at IS NULL"
    cursor = ""
    if after is not None:
        cursor = f"AND (m.memory_id, m.version) > ({p.add(after[0])}, {p.add(after[1])})"
    return list(
        await conn.fetch(
            f"""SELECT {memory_columns(v, p)} FROM memories m
                WHERE {visibility_predicate(v, p)} AND {filter_predicate(f, p)}
                  {current} {cursor}
                ORDER BY m.memory_id, m.version
                LIMIT {p.add(limit)}""",
            *p.values,
        )
    )
