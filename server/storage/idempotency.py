"""SQL of idempotency keys: one record per API key and idempotency key, holding the
request's hash and the memory it produced (an id, never content)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import asyncpg


async def claim_idempotency_key(
    conn: asyncpg.Connection,
    tenant_id: str,
    key_id: str,
    idempotency_key: str,
    method: str,
    request_hash: bytes,
    retention: timedelta,
) -> asyncpg.Record | None:
    """Claim the key for this request; None when claimed now, else the earlier claim.

    This API key's records older than ``retention`` are dropped first, so a key reused
    after that is a new request."""
    await conn.execute(
        """DELETE FROM idempotency_keys
           WHERE tenant_id = $1::uuid AND key_id = $2 AND created_at < now() - $3::interval""",
        tenant_id,
        key_id,
        retention,
    )
    claimed = await conn.fetchval(
        """INSERT INTO idempotency_keys (tenant_id, key_id, idempotency_key, method, request_hash)
           VALUES ($1::uuid, $2, $3, $4, $5)
           ON CONFLICT DO NOTHING RETURNING 1""",
        tenant_id,
        key_id,
        idempotency_key,
        method,
        request_hash,
    )
    if claimed:
        return None
    return await conn.fetchrow(
        """SELECT method, request_hash, memory_id FROM idempotency_keys
           WHERE tenant_id = $1::uuid AND key_id = $2 AND idempotency_key = $3""",
        tenant_id,
        key_id,
        idempotency_key,
    )


async def store_idempotent_result(
    conn: asyncpg.Connection,
    tenant_id: str,
    key_id: str,
    idempotency_key: str,
    memory_id: uuid.UUID,
) -> None:
    """Record which memory the request produced: an id, never content (a replay re-reads it)."""
    await conn.execute(
        """UPDATE idempotency_keys SET memory_id = $4
           WHERE tenant_id = $1::uuid AND key_id = $2 AND idempotency_key = $3""",
        tenant_id,
        key_id,
        idempotency_key,
        memory_id,
    )
