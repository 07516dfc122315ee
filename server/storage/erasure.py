"""SQL of forgetting: tombstones that keep an erased or rejected value from coming back,
blanking every version of a memory, and withdrawing the candidates that copied it."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from brain.server.storage import setlocal
from brain.server.storage.memories import MEMORY_COLUMNS, lock_memory, new_version
from brain.server.storage.visibility import Params, Visibility, visibility_predicate


async def live_tombstones(
    conn: asyncpg.Connection,
    v: Visibility,
    namespace: str,
    user_id: str,
    session_id: str,
    fingerprint: bytes,
) -> list[uuid.UUID]:
    """Live tombstones of this value in this bucket that bind the caller, oldest first.

    A tombstone binds only callers who could see what it erased: the memory it was left
    by must pass the visibility predicate as it is now (erasure keeps its scope and
    labels). Otherwise a tombstone would answer "this text was here" about a memory the
    caller cannot read."""
    p = Params(namespace, user_id, session_id, fingerprint)
    rows = await conn.fetch(
        f"""SELECT t.tombstone_id FROM tombstones t
            WHERE t.tenant_id = {p.add(v.tenant_id)}::uuid
              AND t.namespace = $1 AND t.user_id = $2 AND t.session_id = $3
              AND t.fingerprint = $4 AND t.readmitted_at IS NULL
              AND EXISTS (SELECT 1 FROM memories m
                          WHERE m.tenant_id = t.tenant_id AND m.memory_id = t.memory_id
                            AND m.retired_at IS NULL AND {visibility_predicate(v, p)})
            ORDER BY t.created_at, t.tombstone_id""",
        *p.values,
    )
    return [r["tombstone_id"] for r in rows]


async def add_tombstone(
    conn: asyncpg.Connection,
    tenant_id: Any,
    row: asyncpg.Record,
    fingerprint: bytes,
    cause: str,
    by: str,
) -> uuid.UUID:
    """Leave (or find) the live tombstone of this memory for this value in its bucket.

    Each memory keeps its own tombstone, so what binds a caller follows that memory's
    visibility (``live_tombstones``), never another memory's."""
    tombstone_id: uuid.UUID | None = await conn.fetchval(
        """INSERT INTO tombstones (tenant_id, tombstone_id, namespace, user_id, session_id,
                                   fingerprint, memory_id, cause, created_by)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
           ON CONFLICT (tenant_id, namespace, user_id, session_id, fingerprint, memory_id)
               WHERE readmitted_at IS NULL DO NOTHING
           RETURNING tombstone_id""",
        tenant_id,
        uuid.uuid4(),
        row["namespace"],
        row["user_id"],
        row["session_id"],
        fingerprint,
        row["memory_id"],
        cause,
        by,
    )
    if tombstone_id is None:
        tombstone_id = await conn.fetchval(
            """SELECT tombstone_id FROM tombstones
               WHERE tenant_id = $1 AND namespace = $2 AND user_id = $3 AND session_id = $4
                 AND fingerprint = $5 AND memory_id = $6 AND readmitted_at IS NULL""",
            tenant_id,
            row["namespace"],
            row["user_id"],
            row["session_id"],
            fingerprint,
            row["memory_id"],
        )
    assert tombstone_id is not None
    return tombstone_id


async def erase_all_versions(conn: asyncpg.Connection, tenant_id: Any, memory_id: Any) -> None:
    """Blank content, fingerprint, metadata, tags, embedding and the free-text reasons
    (which may quote the content) in every version."""
    await conn.execute(
        """UPDATE memories SET content = '', fingerprint = NULL, metadata = '{}', tags = '{}',
                  embedding = NULL, embedding_model = NULL, proposal_reason = NULL,
                  review_reason = NULL
           WHERE tenant_id = $1 AND memory_id = $2""",
        tenant_id,
        memory_id,
    )


async def withdraw_copies(
    conn: asyncpg.Connection,
    current: asyncpg.Record,
    fingerprints: Sequence[bytes],
    at: datetime,
    changes: dict[str, Any],
    erase_side: Callable[[asyncpg.Connection, Any, uuid.UUID], Awaitable[None]],
) -> list[uuid.UUID]:
    """Erase and withdraw the open candidates that supersede the memory ``current`` with
    one of its values (the copy graph extraction proposes, or a proposer's): forgetting
    the memory erases its text wherever it was copied. ``erase_side`` erases a copy's
    side records (its graph rows).

    A candidate is visible only to its proposer and to reviewers, so for these statements
    row-level security also admits proposals; every other term still holds, and the
    copies lie in the memory's own bucket with labels it shares, which the forgetting
    key, having write power over the memory, can see."""
    if not fingerprints:
        return []
    before = await conn.fetchval("SELECT COALESCE(current_setting('brain.may_review', true), '')")
    await setlocal.set_local(conn, {"brain.may_review": "on"})
    try:
        ids = await conn.fetch(
            """SELECT c.memory_id FROM memories c
               WHERE c.tenant_id = $1 AND c.retired_at IS NULL AND c.status = 'candidate'
                 AND $2 = ANY (c.supersedes) AND c.fingerprint = ANY ($3::bytea[])
                 AND c.namespace = $4 AND c.user_id = $5 AND c.session_id = $6
                 AND c.labels && $7::text[]
               ORDER BY c.memory_id""",
            current["tenant_id"], current["memory_id"], list(fingerprints),
            current["namespace"], current["user_id"], current["session_id"],
            list(current["labels"]),
        )  # fmt: skip
        withdrawn = []
        for r in ids:
            await lock_memory(conn, current["tenant_id"], r["memory_id"])
            copy = await conn.fetchrow(
                f"""SELECT {MEMORY_COLUMNS} FROM memories m
                    WHERE m.tenant_id = $1 AND m.memory_id = $2 AND m.retired_at IS NULL
                      AND m.status = 'candidate'""",
                current["tenant_id"],
                r["memory_id"],
            )
            if copy is None:  # decided meanwhile
                continue
            await erase_all_versions(conn, current["tenant_id"], r["memory_id"])
            await erase_side(conn, current["tenant_id"], r["memory_id"])
            await new_version(conn, copy, at, {**changes, "status": "withdrawn"})
            withdrawn.append(r["memory_id"])
        return withdrawn
    finally:
        await setlocal.set_local(conn, {"brain.may_review": before})


async def version_fingerprints(
    conn: asyncpg.Connection, tenant_id: Any, memory_id: Any
) -> list[bytes]:
    rows = await conn.fetch(
        """SELECT DISTINCT fingerprint FROM memories
           WHERE tenant_id = $1 AND memory_id = $2 AND fingerprint IS NOT NULL""",
        tenant_id,
        memory_id,
    )
    return [bytes(r[0]) for r in rows]
