"""Per-tenant quotas, read and enforced inside the caller's write transaction."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from brain.server.storage import setlocal
from brain.server.storage.visibility import (
    Params,
    Visibility,
    cell_predicate,
    object_visibility,
    visibility_predicate,
)


@dataclass(frozen=True)
class MemoryQuota:
    limit: int
    used: int


async def reserve_memories(conn: asyncpg.Connection) -> MemoryQuota | None:
    """The tenant's memory quota and current usage, or None when it has none.

    With a quota set this holds the tenant's quota lock until the transaction ends, so
    the count stays true until this write commits (see migration 0009)."""
    row = await conn.fetchrow(
        "SELECT max_memories, used FROM brain_reserve_memories($1::uuid)",
        await setlocal.current_tenant(conn),
    )
    if row is None:
        return None
    return MemoryQuota(limit=row["max_memories"], used=row["used"])


@dataclass(frozen=True)
class DocumentQuota:
    max_documents: int | None
    max_document_bytes: int | None
    documents: int
    document_bytes: int


async def reserve_documents(conn: asyncpg.Connection, tenant_id: str) -> DocumentQuota | None:
    """The tenant's document quotas and current usage, or None when it has none; with a
    quota set, holds the tenant's document quota lock until the transaction ends
    (migration 0042). ``tenant_id`` is the transaction's own (the function refuses others)."""
    row = await conn.fetchrow("SELECT * FROM brain_reserve_documents($1::uuid)", tenant_id)
    if row is None:
        return None
    return DocumentQuota(
        max_documents=row["max_documents"],
        max_document_bytes=row["max_document_bytes"],
        documents=row["documents"],
        document_bytes=row["document_bytes"],
    )


async def visible_memories(conn: asyncpg.Connection, v: Visibility) -> int:
    """What the memory quota counts (active and candidate current memories) among the rows
    ``v`` may see or reopened (`reopened_by`): the active ones from the lexical
    statistics (each visibility cell's row count, lexeme '' of migration 0010, kept exact
    in every write's transaction; a cell is seen whole or not at all), which costs a read
    per cell instead of a scan of the tenant's rows, and the candidates (few: the
    namespace cap bounds them) row by row."""
    p = Params()
    tenant = f"{p.add(v.tenant_id)}::uuid"
    return int(
        await conn.fetchval(
            f"""SELECT (SELECT COALESCE(sum(t.df), 0) FROM lexical_terms t
                        JOIN lexical_cells c USING (tenant_id, cell_id)
                        WHERE t.tenant_id = {tenant} AND t.config = 'english'
                          AND t.lexeme = '' AND {cell_predicate(v, p, "c")})
                     + (SELECT count(*) FROM memories m
                        WHERE m.tenant_id = {tenant} AND m.status = 'candidate'
                          AND m.retired_at IS NULL AND {visibility_predicate(v, p)})
                     + {reopened_by(v, p)}""",
            *p.values,
        )
    )


def reopened_by(
    v: Visibility, p: Params, namespace: str | None = None, unexpired: bool = False
) -> str:
    """How many candidates this principal made what they are and cannot see: memories it
    reopened for review by forgetting the successor it had saved over another's memory
    (their author's proposals again, hidden from a key that may not review). It knows of
    them, so they count as seen: counted as hidden, they were a known number it could move
    across the quota's rounding at will (migration 0067). A reviewer sees them already."""
    if v.may_review:
        return "0"
    tenant, principal = p.add(v.tenant_id), p.add(v.principal)
    where, fresh = p.add(namespace), p.add(unexpired)
    return f"brain_candidates_reopened_by({tenant}::uuid, {principal}, {where}, {fresh})"


async def visible_documents(conn: asyncpg.Connection, v: Visibility) -> tuple[int, int]:
    """What the document quotas count (current, undeleted documents and their bytes) among
    the documents ``v`` may see."""
    p = Params()
    row = await conn.fetchrow(
        f"""SELECT count(*) AS n, COALESCE(sum(d.size_bytes), 0)::bigint AS bytes
            FROM documents d
            WHERE d.tenant_id = {p.add(v.tenant_id)}::uuid AND d.retired_at IS NULL
              AND d.status = 'active' AND {object_visibility(v, p, "d")}""",
        *p.values,
    )
    assert row is not None  # an aggregate always answers one row
    return int(row["n"]), int(row["bytes"])
