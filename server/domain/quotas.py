"""Per-tenant quotas: the check every write that adds stored memories makes first."""

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
