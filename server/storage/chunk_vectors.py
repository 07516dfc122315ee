"""SQL of the chunk-vector filler: claim pending chunks, store their vectors (and token
vectors), release them; claim and store the token vectors of chunks embedded without them.

The filler serves every tenant of the database, so it goes through the narrow
``SECURITY DEFINER`` functions of migrations 0032, 0035, 0040, 0058 and 0065, never past
row-level security itself. Each call is its own short transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg


@dataclass(frozen=True, slots=True)
class Claimed:
    """A pending chunk leased to this filler: its text (which the store checks is still
    there) and heading path, from which its vector is made."""

    tenant_id: uuid.UUID
    chunk_id: uuid.UUID
    content: str
    heading_path: tuple[str, ...]
    attempts: int


async def claim(
    pool: asyncpg.Pool, limit: int, lease_seconds: float, quiet_seconds: float, yield_seconds: float
) -> list[Claimed]:
    """Lease up to ``limit`` due pending chunks (oldest due first); none that another
    filler holds. While chunks keep being committed (one within ``quiet_seconds``), only
    those waiting ``yield_seconds`` or more: fillers give way to ingest."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT * FROM brain_claim_chunk_embeddings($1, $2, $3, $4)",
            limit, lease_seconds, quiet_seconds, yield_seconds,
        )  # fmt: skip
        paths: dict[uuid.UUID, tuple[str, ...]] = {}
        for tenant in {r["tenant_id"] for r in rows}:  # one call per tenant (its shard)
            for h in await conn.fetch(
                "SELECT * FROM brain_chunk_embedding_headings($1, $2::uuid[])",
                tenant, [r["chunk_id"] for r in rows if r["tenant_id"] == tenant],
            ):  # fmt: skip
                paths[h["chunk_id"]] = tuple(h["heading_path"])
    return [
        Claimed(r["tenant_id"], r["chunk_id"], r["content"], paths.get(r["chunk_id"], ()),
                r["embed_attempts"])
        for r in rows
    ]  # fmt: skip


async def store(
    pool: asyncpg.Pool,
    claimed: Sequence[Claimed],
    vectors: Sequence[Any],
    model: str | None,
    token_vectors: Sequence[bytes | None] | None = None,
) -> int:
    """Store each vector (and its token vectors, if any) on its chunk if the chunk still
    holds the text they were made from (current, not erased); return how many were
    stored, in one transaction."""
    tokens = token_vectors or [None] * len(claimed)
    stored = 0
    async with pool.acquire() as conn, conn.transaction():
        for c, vector, form in zip(claimed, vectors, tokens, strict=True):
            if await conn.fetchval(
                "SELECT brain_store_chunk_embedding($1, $2, $3, $4, $5, $6)",
                c.tenant_id, c.chunk_id, c.content, vector, model, form,
            ):  # fmt: skip
                stored += 1
    return stored


async def claim_token_backfill(
    pool: asyncpg.Pool, limit: int, lease_seconds: float, quiet_seconds: float, model: str
) -> list[Claimed]:
    """Lease up to ``limit`` chunks that have a vector of ``model`` but no token vectors
    (embedded before they were stored); none while chunks are being committed."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT * FROM brain_claim_chunk_token_vectors($1, $2, $3, $4)",
            limit, lease_seconds, quiet_seconds, model,
        )  # fmt: skip
    return [
        Claimed(r["tenant_id"], r["chunk_id"], r["content"], tuple(r["heading_path"]), 0)
        for r in rows
    ]


async def store_token_vectors(
    pool: asyncpg.Pool, claimed: Sequence[Claimed], token_vectors: Sequence[bytes]
) -> int:
    """Store each chunk's token vectors if it still holds the text they were made from and
    has none yet; return how many were stored, in one transaction."""
    stored = 0
    async with pool.acquire() as conn, conn.transaction():
        for c, form in zip(claimed, token_vectors, strict=True):
            if await conn.fetchval(
                "SELECT brain_store_chunk_token_vectors($1, $2, $3, $4)",
                c.tenant_id, c.chunk_id, c.content, form,
            ):  # fmt: skip
                stored += 1
    return stored


async def release(
    pool: asyncpg.Pool,
    claimed: Sequence[Claimed],
    *,
    failed: bool,
    base_seconds: float = 0.0,
    max_seconds: float = 0.0,
) -> None:
    """Give claimed chunks back: after a failure, each after its backoff; else at once."""
    if not claimed:
        return
    async with pool.acquire() as conn:
        await conn.execute(
            "SELECT brain_release_chunk_embeddings($1::uuid[], $2::uuid[], $3, $4, $5)",
            [c.tenant_id for c in claimed], [c.chunk_id for c in claimed], failed,
            base_seconds, max_seconds,
        )  # fmt: skip
