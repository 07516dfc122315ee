"""SQL of document tombstones (migration 0041): what keeps a deleted document's content
from coming back to its collection unnoticed.

A tombstone carries its document's scope and labels, so ``object_visibility`` (and
row-level security) apply to it as to the document: it binds, and is lifted by, only
callers who could see the document. It holds a keyed fingerprint, never the text.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from brain.server.storage.visibility import Params, Visibility, object_visibility


async def lock_contents(
    conn: asyncpg.Connection, tenant_id: Any, bucket: tuple[str, str, str, str],
    fingerprints: Iterable[bytes],
) -> None:  # fmt: skip
    """Serialise, until commit, the puts and deletes of these contents in one collection of
    one bucket (namespace, user, session, collection): a put checks for a tombstone only
    after a delete of the same content has committed it, or before the delete begins."""
    for fingerprint in sorted(set(fingerprints)):  # one order: no deadlock between deletes
        key = "\x1f".join(["document-content", str(tenant_id), *bucket, fingerprint.hex()])
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)


@dataclass(frozen=True, slots=True)
class HeldBack:
    """The live tombstones of a put's content that bind the caller (oldest first), and the
    put's transaction time, read in one round trip."""

    tombstones: list[uuid.UUID]
    at: datetime


async def held_back(
    conn: asyncpg.Connection,
    v: Visibility,
    bucket: tuple[str, str, str, str],
    fingerprints: list[bytes],
) -> HeldBack:
    """Once ``lock_contents`` holds the content: the live tombstones of this content (any
    of its ``fingerprints``) in this collection of this bucket that bind ``v`` (it may see
    the documents they were left by), and the clock."""
    p = Params(*bucket, fingerprints)
    row = await conn.fetchrow(
        f"""SELECT ARRAY(
                    SELECT t.tombstone_id FROM document_tombstones t
                    WHERE t.namespace = $1 AND t.user_id = $2 AND t.session_id = $3
                      AND t.collection = $4 AND t.fingerprint = ANY($5::bytea[])
                      AND t.readmitted_at IS NULL
                      AND {object_visibility(v, p, "t")}
                    ORDER BY t.created_at, t.tombstone_id) AS held,
                clock_timestamp() AS at""",
        *p.values,
    )
    assert row is not None
    return HeldBack(list(row["held"]), row["at"])


async def readmit(conn: asyncpg.Connection, v: Visibility, ids: list[uuid.UUID], by: str) -> None:
    """Lift these tombstones (the caller said so: ``readmit_tombstoned``)."""
    p = Params(ids, by)
    await conn.execute(
        f"""UPDATE document_tombstones t SET readmitted_at = now(), readmitted_by = $2
            WHERE t.tombstone_id = ANY($1::uuid[]) AND t.readmitted_at IS NULL
              AND {object_visibility(v, p, "t")}""",
        *p.values,
    )


async def contents(conn: asyncpg.Connection, tenant_id: Any, document_id: uuid.UUID) -> list[str]:
    """The distinct contents of a document's versions (read before they are erased)."""
    rows = await conn.fetch(
        """SELECT DISTINCT content FROM documents
           WHERE tenant_id = $1 AND document_id = $2 AND content <> ''""",
        tenant_id,
        document_id,
    )
    return [r["content"] for r in rows]


async def add(
    conn: asyncpg.Connection, document: asyncpg.Record, fingerprints: Iterable[bytes], by: str
) -> None:
    """Leave a tombstone of each content for ``document`` (its current version's row:
    scope, collection and labels), in its bucket and collection."""
    d = document
    rows = [
        (d["tenant_id"], uuid.uuid4(), d["namespace"], d["user_id"], d["session_id"],
         d["collection"], list(d["labels"]), fingerprint, d["document_id"], by)
        for fingerprint in sorted(set(fingerprints))
    ]  # fmt: skip
    await conn.executemany(
        """INSERT INTO document_tombstones (tenant_id, tombstone_id, namespace, user_id,
               session_id, collection, labels, fingerprint, document_id, created_by)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
           ON CONFLICT (tenant_id, namespace, user_id, session_id, collection, fingerprint,
                        document_id) WHERE readmitted_at IS NULL DO NOTHING""",
        rows,
    )
