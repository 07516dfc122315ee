"""Per-tenant quotas: the check every write that adds memories or documents makes first."""

from __future__ import annotations

import asyncpg

from brain.server.errors import ResourceExhausted
from brain.server.storage import quotas as sql


async def reserve_memories(conn: asyncpg.Connection, adding: int) -> None:
    """Refuse a write that would take the tenant past its memory quota.

    Call it in the write's transaction, right before the insert: concurrent writers of
    the tenant then wait for each other, so together they never overshoot.

    The refusal names the limit, never how many the tenant stores: that count includes
    memories the caller cannot see (``brain-admin tenants list`` shows it to operators)."""
    if adding <= 0:
        return
    quota = await sql.reserve_memories(conn)
    if quota is not None and quota.used + adding > quota.limit:
        raise ResourceExhausted(
            f"quota memories exceeded: this tenant may store at most {quota.limit} "
            "memories; forget some or ask an operator to raise the quota "
            "(brain-admin tenants set-quota)"
        )


async def reserve_documents(
    conn: asyncpg.Connection, tenant_id: str, adding: int, adding_bytes: int
) -> None:
    """Refuse a put that would take the tenant past its document quotas: ``adding``
    documents (1 for a new one, 0 for a new version) and ``adding_bytes`` of content (the
    new version's size less the old one's). Called as ``reserve_memories`` is, in the
    put's transaction right before it writes, and, like it, names the limit and never how
    much the tenant stores."""
    if adding <= 0 and adding_bytes <= 0:
        return
    quota = await sql.reserve_documents(conn, tenant_id)
    if quota is None:
        return
    limit = quota.max_documents
    if adding > 0 and limit is not None and quota.documents + adding > limit:
        raise ResourceExhausted(
            f"quota documents exceeded: this tenant may store at most {limit} documents; "
            "delete some or ask an operator to raise the quota "
            "(brain-admin tenants set-quota --documents)"
        )
    limit = quota.max_document_bytes
    if adding_bytes > 0 and limit is not None and quota.document_bytes + adding_bytes > limit:
        raise ResourceExhausted(
            f"quota document bytes exceeded: this tenant may store at most {limit} bytes of "
            "documents; delete some or ask an operator to raise the quota "
            "(brain-admin tenants set-quota --document-bytes)"
        )
