"""SQL for knowledge documents and their chunks. Every read embeds the visibility predicate.

A document's rows (versions and chunks) each carry its scope and labels (migration 0020),
so ``object_visibility`` applies to any of them directly.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from brain.server.storage.visibility import Params, Visibility, object_visibility, write_predicate

DOCUMENT_COLUMNS = """d.tenant_id, d.document_id, d.version, d.namespace, d.user_id,
    d.session_id, d.collection, d.path, d.format, d.labels, d.status, d.content_hash,
    d.size_bytes, d.chunk_count, d.recorded_at, d.retired_at, d.created_by, d.changed_by,
    d.change,
    (d.status = 'active' AND NOT EXISTS (
        SELECT 1 FROM document_chunks c
        WHERE c.tenant_id = d.tenant_id AND c.document_id = d.document_id
          AND c.version = d.version AND c.embedding IS NULL)) AS fully_embedded"""


def chunk_columns(v: Visibility, p: Params) -> str:
    """What a knowledge hit shows (``importance`` is neutral, so only recency boosts), and
    the model of its vector (NULL: not embedded yet), which ranking reads."""
    return """m.tenant_id, m.chunk_id, m.document_id, m.version, m.chunk_no, m.namespace,
        m.user_id, m.session_id, m.collection, m.path, m.labels, m.content, m.heading_path,
        m.line_start, m.line_end, m.recorded_at, 0.5::real AS importance, m.embedding_model"""


@dataclass(frozen=True, slots=True)
class NewChunk:
    content: str
    heading_path: list[str]
    line_start: int
    line_end: int
    embedding: Any = None
    embedding_model: str | None = None


@dataclass(frozen=True, slots=True)
class NewVersion:
    document_id: uuid.UUID
    version: int
    namespace: str
    user_id: str
    session_id: str
    collection: str
    path: str
    format: str
    labels: list[str]
    content: str
    content_hash: bytes
    created_by: str
    changed_by: str
    changed_by_key: str
    chunks: Sequence[NewChunk]


def chunk_where(v: Visibility, collections: Sequence[str]) -> Callable[[Params], str]:
    """The predicate every knowledge lane puts inside its statement: visible, current,
    and in the asked collections."""

    def where(p: Params) -> str:
        clauses = [object_visibility(v, p, "m"), "m.retired_at IS NULL", "m.content <> ''"]
        if collections:
            clauses.append(f"m.collection = ANY({p.add(list(collections))}::text[])")
        return " AND ".join(clauses)

    return where


async def lock_path(
    conn: asyncpg.Connection, tenant_id: str, namespace: str, user_id: str, session_id: str,
    collection: str, path: str,
) -> None:  # fmt: skip
    """Serialise puts to one path of one bucket until commit."""
    key = "\x1f".join(["document", tenant_id, namespace, user_id, session_id, collection, path])
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)


async def lock_document(conn: asyncpg.Connection, tenant_id: Any, document_id: uuid.UUID) -> None:
    key = f"document\x1f{tenant_id}\x1f{document_id}"
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)


async def find_at_path(
    conn: asyncpg.Connection, v: Visibility, namespace: str, user_id: str, session_id: str,
    collection: str, path: str,
) -> asyncpg.Record | None:  # fmt: skip
    """The current, active document at this path of this exact bucket that ``v`` may see
    (the oldest, should two with disjoint labels share the path)."""
    p = Params(namespace, user_id, session_id, collection, path)
    return await conn.fetchrow(
        f"""SELECT {DOCUMENT_COLUMNS} FROM documents d
            WHERE d.namespace = $1 AND d.user_id = $2 AND d.session_id = $3
              AND d.collection = $4 AND d.path = $5 AND d.retired_at IS NULL
              AND d.status = 'active' AND {object_visibility(v, p, "d")}
            ORDER BY d.document_id LIMIT 1""",
        *p.values,
    )


async def held_elsewhere(
    conn: asyncpg.Connection, v: Visibility, tenant_id: Any, bucket: Sequence[str],
    document_id: uuid.UUID, digests: Sequence[bytes],
) -> set[bytes]:  # fmt: skip
    """Those of ``digests`` (SHA-256 of a content) that another current, active document of
    the bucket's collection (``bucket``: namespace, user, session, collection) holds now,
    among the documents ``v`` may see: a file moved to another path, whose old document's
    deletion rejects no content."""
    if not digests:
        return set()
    p = Params(tenant_id, *bucket, document_id, list(digests))
    rows = await conn.fetch(
        f"""SELECT DISTINCT d.content_hash FROM documents d
            WHERE d.tenant_id = $1 AND d.namespace = $2 AND d.user_id = $3
              AND d.session_id = $4 AND d.collection = $5 AND d.document_id <> $6
              AND d.content_hash = ANY($7::bytea[]) AND d.retired_at IS NULL
              AND d.status = 'active' AND {object_visibility(v, p, "d")}""",
        *p.values,
    )
    return {bytes(r["content_hash"]) for r in rows}


async def insert_version(
    conn: asyncpg.Connection,
    tenant_id: str,
    new: NewVersion,
    at: datetime,
    *,
    one_statement: bool = True,
) -> None:
    """Insert a document version and its chunks, recorded at ``at`` (the chunks in one
    statement unless ``one_statement`` is off)."""
    await conn.execute(
        """INSERT INTO documents (tenant_id, document_id, version, namespace, user_id,
               session_id, collection, path, format, labels, status, content, content_hash,
               size_bytes, chunk_count, recorded_at, created_by, changed_by, changed_by_key,
               change)
           VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'active', $11, $12, $13, $14,
                   $15, $16, $17, $18, 'put')""",
        tenant_id, new.document_id, new.version, new.namespace, new.user_id, new.session_id,
        new.collection, new.path, new.format, new.labels, new.content, new.content_hash,
        len(new.content.encode()), len(new.chunks), at, new.created_by, new.changed_by,
        new.changed_by_key,
    )  # fmt: skip
    if not new.chunks:
        return
    # Vectors given, or a Citus coordinator (which writes an INSERT ... SELECT of many rows
    # through COPY, refused under row-level security): row by row.
    if not one_statement or any(c.embedding is not None for c in new.chunks):
        await conn.executemany(
            """INSERT INTO document_chunks (tenant_id, chunk_id, document_id, version,
                   chunk_no, namespace, user_id, session_id, collection, path, labels,
                   content, heading_path, line_start, line_end, recorded_at, embedding,
                   embedding_model)
               VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
                       $15, $16, $17, $18)""",
            [_chunk_row(tenant_id, new, n, c, at) for n, c in enumerate(new.chunks)],
        )
        return
    # A put's chunks (no vectors yet: the filler embeds them) in one statement: the
    # document's columns once, the chunks' as arrays; a heading path travels as JSON text
    # (arrays of arrays of different lengths do not exist in PostgreSQL).
    await conn.execute(
        """INSERT INTO document_chunks (tenant_id, chunk_id, document_id, version, chunk_no,
               namespace, user_id, session_id, collection, path, labels, content,
               heading_path, line_start, line_end, recorded_at)
           SELECT $1::uuid, c.chunk_id, $2, $3, c.chunk_no, $4, $5, $6, $7, $8, $9,
                  c.content,
                  ARRAY(SELECT h.part FROM jsonb_array_elements_text(c.heading::jsonb)
                            WITH ORDINALITY AS h(part, n) ORDER BY h.n),
                  c.line_start, c.line_end, $10
           FROM unnest($11::uuid[], $12::int[], $13::text[], $14::text[], $15::int[],
                       $16::int[]) AS c(chunk_id, chunk_no, content, heading, line_start,
                                        line_end)""",
        tenant_id, new.document_id, new.version, new.namespace, new.user_id, new.session_id,
        new.collection, new.path, new.labels, at,
        [uuid.uuid4() for _ in new.chunks], list(range(len(new.chunks))),
        [c.content for c in new.chunks], [json.dumps(c.heading_path) for c in new.chunks],
        [c.line_start for c in new.chunks], [c.line_end for c in new.chunks],
    )  # fmt: skip


def _chunk_row(
    tenant_id: str, new: NewVersion, n: int, c: NewChunk, at: datetime
) -> tuple[Any, ...]:
    return (
        tenant_id, uuid.uuid4(), new.document_id, new.version, n, new.namespace, new.user_id,
        new.session_id, new.collection, new.path, new.labels, c.content, c.heading_path,
        c.line_start, c.line_end, at, c.embedding, c.embedding_model,
    )  # fmt: skip


async def retire(
    conn: asyncpg.Connection, tenant_id: Any, document_id: uuid.UUID, version: int, at: datetime
) -> None:
    """Close a version and its chunks at ``at``; the chunks' stored token vectors go (no
    search reads a retired chunk: they would only take room)."""
    for table, more in (("documents", ""), ("document_chunks", ", token_vectors = NULL")):
        await conn.execute(
            f"""UPDATE {table} SET retired_at = $4{more}
                WHERE tenant_id = $1 AND document_id = $2 AND version = $3
                  AND retired_at IS NULL""",
            tenant_id,
            document_id,
            version,
            at,
        )


async def relabel(
    conn: asyncpg.Connection, tenant_id: Any, document_id: uuid.UUID, labels: list[str]
) -> None:
    """A document is one object for visibility: its labels change on every row at once."""
    for table in ("documents", "document_chunks"):
        await conn.execute(
            f"UPDATE {table} SET labels = $3 WHERE tenant_id = $1 AND document_id = $2",
            tenant_id,
            document_id,
            labels,
        )


async def lock_current(
    conn: asyncpg.Connection, v: Visibility, document_id: uuid.UUID
) -> asyncpg.Record | None:
    """The current version of a visible document, its writer lock held until commit, with
    ``writable`` (``write_predicate``) decided in the same statement."""
    p = Params(document_id)
    tenant_id = await conn.fetchval(
        f"""SELECT d.tenant_id FROM documents d
            WHERE d.document_id = $1 AND d.retired_at IS NULL
              AND {object_visibility(v, p, "d")}""",
        *p.values,
    )
    if tenant_id is None:
        return None
    await lock_document(conn, tenant_id, document_id)
    p = Params(document_id)
    return await conn.fetchrow(
        f"""SELECT {DOCUMENT_COLUMNS}, {write_predicate(v, p, "d")} AS writable
            FROM documents d
            WHERE d.document_id = $1 AND d.retired_at IS NULL
              AND {object_visibility(v, p, "d")}""",
        *p.values,
    )


async def erase(conn: asyncpg.Connection, tenant_id: Any, document_id: uuid.UUID) -> None:
    """Blank the text, path, hash, headings, vectors and token vectors of every version
    and chunk."""
    await conn.execute(
        """UPDATE documents SET content = '', path = '', content_hash = NULL
           WHERE tenant_id = $1 AND document_id = $2""",
        tenant_id,
        document_id,
    )
    await conn.execute(
        """UPDATE document_chunks SET content = '', path = '', heading_path = '{}',
                  embedding = NULL, embedding_model = NULL, token_vectors = NULL
           WHERE tenant_id = $1 AND document_id = $2""",
        tenant_id,
        document_id,
    )


async def insert_deletion(
    conn: asyncpg.Connection, current: asyncpg.Record, at: datetime, by: str, key_id: str
) -> int:
    """Retire the current version and record the deletion as the next one."""
    await retire(conn, current["tenant_id"], current["document_id"], current["version"], at)
    version = int(current["version"]) + 1
    await conn.execute(
        """INSERT INTO documents (tenant_id, document_id, version, namespace, user_id,
               session_id, collection, path, format, labels, status, content, recorded_at,
               created_by, changed_by, changed_by_key, change)
           SELECT tenant_id, document_id, $3, namespace, user_id, session_id, collection, '',
                  format, labels, 'deleted', '', $4, created_by, $5, $6, 'delete'
           FROM documents WHERE tenant_id = $1 AND document_id = $2 AND version = $7""",
        current["tenant_id"],
        current["document_id"],
        version,
        at,
        by,
        key_id,
        current["version"],
    )
    return version


async def get(
    conn: asyncpg.Connection, v: Visibility, document_id: uuid.UUID, version: int
) -> asyncpg.Record | None:
    """A visible document's version (0: the current one), with its content."""
    p = Params(document_id)
    which = f"d.version = {p.add(version)}" if version else "d.retired_at IS NULL"
    return await conn.fetchrow(
        f"""SELECT {DOCUMENT_COLUMNS}, d.content FROM documents d
            WHERE d.document_id = $1 AND {which} AND {object_visibility(v, p, "d")}""",
        *p.values,
    )


async def list_page(
    conn: asyncpg.Connection,
    v: Visibility,
    collection: str,
    after: uuid.UUID | None,
    limit: int,
) -> list[asyncpg.Record]:
    """Current active documents, newest id first; the cursor is the last id seen."""
    p = Params()
    clauses = ["d.retired_at IS NULL", "d.status = 'active'", object_visibility(v, p, "d")]
    if collection:
        clauses.append(f"d.collection = {p.add(collection)}")
    if after is not None:
        clauses.append(f"d.document_id < {p.add(after)}")
    return list(
        await conn.fetch(
            f"""SELECT {DOCUMENT_COLUMNS} FROM documents d
                WHERE {" AND ".join(clauses)}
                ORDER BY d.document_id DESC LIMIT {p.add(limit)}""",
            *p.values,
        )
    )


async def clock(conn: asyncpg.Connection) -> datetime:
    value: datetime = await conn.fetchval("SELECT clock_timestamp()")
    return value


async def neighbours(
    conn: asyncpg.Connection, v: Visibility, where: Callable[[Params], str],
    hits: Sequence[asyncpg.Record], span: int,
) -> list[asyncpg.Record]:  # fmt: skip
    """The chunks within ``span`` places of each hit in its document version (the hits
    themselves excluded) that pass ``where`` (`chunk_where`: visible and current)."""
    if not hits or span < 1:
        return []
    p = Params(
        [h["tenant_id"] for h in hits],
        [h["document_id"] for h in hits],
        [h["version"] for h in hits],
        [h["chunk_no"] for h in hits],
    )
    allowed, near = where(p), p.add(span)
    return list(
        await conn.fetch(
            f"""SELECT DISTINCT ON (m.tenant_id, m.chunk_id) {chunk_columns(v, p)}
                FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::int[])
                         AS h(tenant_id, document_id, version, chunk_no)
                JOIN document_chunks m
                  ON m.tenant_id = h.tenant_id AND m.document_id = h.document_id
                 AND m.version = h.version
                 AND m.chunk_no BETWEEN h.chunk_no - {near} AND h.chunk_no + {near}
                 AND m.chunk_no <> h.chunk_no
                WHERE {allowed}""",
            *p.values,
        )
    )


async def token_vectors(
    conn: asyncpg.Connection, where: Callable[[Params], str], hits: Sequence[asyncpg.Record]
) -> dict[Any, bytes]:
    """The stored token vectors (late interaction's form) of those of ``hits`` that pass
    ``where`` (`chunk_where`: visible and current) and have them, by chunk id."""
    if not hits:
        return {}
    p = Params([h["tenant_id"] for h in hits], [h["chunk_id"] for h in hits])
    rows = await conn.fetch(
        f"""SELECT m.chunk_id, m.token_vectors
            FROM unnest($1::uuid[], $2::uuid[]) AS h(tenant_id, chunk_id)
            JOIN document_chunks m ON m.tenant_id = h.tenant_id AND m.chunk_id = h.chunk_id
            WHERE {where(p)} AND octet_length(m.token_vectors) > 0""",
        *p.values,
    )
    return {r["chunk_id"]: bytes(r["token_vectors"]) for r in rows}
