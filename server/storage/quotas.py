"""Per-tenant quotas, read and enforced inside the caller's write transaction."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg


@dataclass(frozen=True)
class MemoryQuota:
    limit: int
    used: int


async def reserve_memories(conn: asyncpg.Connection) -> MemoryQuota | None:
    """The tenant's memory quota and current usage, or None when it has none.

    With a quota set this holds the tenant's quota lock until the transaction ends, so
    the count stays true until this write commits (see migration 0009)."""
    row = await conn.fetchrow("SELECT max_memories, used FROM brain_reserve_memories()")
    if row is None:
        return None
    return MemoryQuota(limit=row["max_memories"], used=row["used"])


@dataclass(frozen=True)
class DocumentQuota:
    max_documents: int | None
    max_document_bytes: int | None
    documents: int
    document_bytes: int
