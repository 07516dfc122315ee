"""brain-admin embeddings: status, backfill, set-dimension."""

from __future__ import annotations

import argparse
import operator
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector

from brain.server.admin.registry import Context, UsageError, acting, command, count, output
from brain.server.domain.knowledge.measures import embedding_text
from brain.server.domain.memories import model_id
from brain.server.domain.retrieval.embedders import Embedder, EmbedderError, build_embedder
from brain.server.runtime.config import add_embedder_arguments, embedder_settings
from brain.server.storage.db import embedding_dimension

_PENDING = """m.embedding IS NULL AND m.retired_at IS NULL AND m.content <> ''
              AND m.status IN ('active', 'candidate')"""


def register(subparsers: Any) -> None:
    """Add the ``embeddings`` subcommands to brain-admin."""
    group = subparsers.add_parser(
        "embeddings", help="vectors for the semantic lane"
    ).add_subparsers(dest="sub", required=True)
    p: argparse.ArgumentParser = command(
        group, "status", cmd_status, "count memories and document chunks with and without a vector"
    )
    p.add_argument("--tenant")
    p = command(group, "backfill", cmd_backfill, "embed memories stored without a vector")
    p.add_argument("--tenant", help="only this tenant (default: all)")
    p.add_argument("--batch", type=count(1), default=64, help="texts per embedder call")
    p.add_argument(
        "--reembed",
        action="store_true",
        help="also re-embed vectors another model made (after choosing another embedder "
        "for the server or, with --tenant-embedder, for the tenant)",
    )
    add_embedder_arguments(p)
    p = command(
        group,
        "set-dimension",
        cmd_set_dimension,
        "resize the vector column for another embedder (drops every stored vector)",
    )
    p.add_argument("dimension", type=int)
    p.add_argument("--yes", action="store_true", help="confirm dropping the stored vectors")


async def _tenant_clause(conn: asyncpg.Connection, tenant: str | None) -> tuple[str, list[Any]]:
    if tenant is None:
        return "TRUE", []
    tenant_id = await conn.fetchval("SELECT tenant_id FROM tenants WHERE name = $1", tenant)
    if tenant_id is None:
        raise UsageError(f"no tenant named {tenant!r}")
    return "m.tenant_id = $1", [tenant_id]


async def cmd_status(ctx: Context) -> None:
    async with ctx.connect() as conn:
        where, args = await _tenant_clause(conn, ctx.args.tenant)
        row = await conn.fetchrow(
            f"""SELECT count(*) FILTER (WHERE m.embedding IS NOT NULL) AS embedded,
                       count(*) FILTER (WHERE {_PENDING}) AS pending,
                       array_agg(DISTINCT m.embedding_model)
                           FILTER (WHERE m.embedding_model IS NOT NULL) AS models
                FROM memories m WHERE m.retired_at IS NULL AND {where}""",
            *args,
        )
        # Chunks wait for the server's background filler; those it failed on wait longer.
        chunks = await conn.fetchrow(
            f"""SELECT count(*) FILTER (WHERE m.embedding IS NOT NULL) AS embedded,
                       count(*) FILTER (WHERE {_CHUNK_VECTORS.pending}) AS pending,
                       count(*) FILTER (WHERE {_CHUNK_VECTORS.pending}
                                          AND m.embed_attempts > 0) AS retrying,
                       COALESCE(max(m.embed_attempts) FILTER (
                           WHERE {_CHUNK_VECTORS.pending}), 0) AS most_attempts,
                       COALESCE(extract(epoch FROM clock_timestamp() - min(m.recorded_at)
                           FILTER (WHERE {_CHUNK_VECTORS.pending})), 0)::bigint AS oldest,
                       count(*) FILTER (WHERE m.embedding_model = 'local'
                                          AND m.token_vectors IS NULL
                                          AND m.content <> '') AS tokens_pending
                FROM document_chunks m WHERE m.retired_at IS NULL AND {where}""",
            *args,
        )
        dimension = await embedding_dimension(conn)
    assert row is not None and chunks is not None
    data = {
        "dimension": dimension,
        "embedded": row["embedded"],
        "pending": row["pending"],
        "models": row["models"] or [],
        "chunks_embedded": chunks["embedded"],
        "chunks_pending": chunks["pending"],
        "chunks_retrying": chunks["retrying"],
        "chunks_most_failed_attempts": chunks["most_attempts"],
        "chunks_oldest_pending_seconds": chunks["oldest"],
        # Embedded before their token vectors were stored (migration 0065): the filler's
        # backfill fills them (docs: Knowledge base, Late interaction).
        "chunks_token_vectors_pending": chunks["tokens_pending"],
    }
    waiting = ""
    if chunks["pending"]:
        waiting = f"; the oldest pending chunk has waited {chunks['oldest']} s" + (
            f", one failed {chunks['most_attempts']} times" if chunks["most_attempts"] else ""
        )

    output(
        ctx.args,
        data,
        f"dimension {dimension}: {row['embedded']} memories embedded "
        f"({', '.join(data['models']) or 'no model yet'}), {row['pending']} waiting for a vector; "
        f"{chunks['embedded']} document chunks embedded, {chunks['pending']} pending "
        f"({chunks['retrying']} after a failed embedding, retried with backoff){waiting}"
        + (
            f"; {chunks['tokens_pending']} chunks wait for their token vectors (filled in "
            "the background)"
            if chunks["tokens_pending"]
            else ""
        ),
    )


async def cmd_backfill(ctx: Context) -> None:
    """Embed every current memory that has no vector, in batches, with a progress line."""
    settings = embedder_settings(ctx.args)
    try:
        embedder = build_embedder(
            str(settings["embedder"]),
            openai_url=settings["openai_url"],  # type: ignore[arg-type]
            openai_model=settings["openai_model"],  # type: ignore[arg-type]
            openai_api_key=settings["openai_api_key"],  # type: ignore[arg-type]
            dimension=settings["embedding_dimension"],  # type: ignore[arg-type]
        )
    except EmbedderError as exc:
        raise UsageError(str(exc)) from exc
    if embedder.dimension == 0:
        raise UsageError("--embedder none makes no vectors; choose local, multilingual or openai")
    model = model_id(embedder)
    async with ctx.connect() as conn:
        await register_vector(conn)
        if embedder.dimension != await embedding_dimension(conn):
            raise UsageError(
                f"the embedder makes {embedder.dimension}-dimensional vectors but the column "
                f"holds {await embedding_dimension(conn)}; run `embeddings set-dimension` first"
            )
        where, args = await _tenant_clause(conn, ctx.args.tenant)
        if ctx.args.reembed:
            # Vectors of another model are cleared first, so the backfill below (which
            # fills rows without a vector) makes them again; the semantic lane never
            # compares another model's vectors, so a search meanwhile misses only them.
            # A chunk's token vectors go with its vector (the filler makes them again).
            for table, more in (("memories", ""), ("document_chunks", ", token_vectors = NULL")):
                async with acting(conn):
                    await conn.execute(
                        f"""UPDATE {table} m SET embedding = NULL, embedding_model = NULL{more}
                            WHERE m.embedding IS NOT NULL AND m.retired_at IS NULL
                              AND m.embedding_model IS DISTINCT FROM ${len(args) + 1}
                              AND {where}""",
                        *args,
                        model,
                    )
        done = await _backfill_memories(conn, embedder, model, where, args, ctx.args.batch)
        print(file=sys.stderr)
        chunks = await _backfill_chunks(conn, embedder, model, where, args, ctx.args.batch)
    print(file=sys.stderr)

    summary = f"backfilled {done} memories and {chunks} document chunks with {model}"
    output(ctx.args, {"backfilled": done, "chunks": chunks, "model": model}, summary)


@dataclass(frozen=True)
class _Vectors:
    """Rows of one table that need a vector. ``key`` names a row after its tenant (paged by
    its first column); ``pending`` is re-checked at the write, so a forget or delete that
    lands while the embedder runs leaves no vector of the erased text behind."""

    table: str
    key: tuple[str, ...]
    pending: str
    noun: str
    # The columns a vector is made from, and how (a chunk's: its heading path and text).
    columns: str = "m.content"
    text: Callable[[asyncpg.Record], str] = operator.itemgetter("content")


_MEMORY_VECTORS = _Vectors("memories", ("memory_id", "version"), _PENDING, "memories")
_CHUNK_VECTORS = _Vectors(
    "document_chunks",
    ("chunk_id",),
    "m.embedding IS NULL AND m.retired_at IS NULL AND m.content <> ''",
    "document chunks",
    "m.content, m.heading_path",
    lambda r: embedding_text(r["heading_path"], r["content"]),
)


async def _backfill(
    conn: asyncpg.Connection, embedder: Embedder, model: str | None, rows_of: _Vectors,
    where: str, args: list[Any], batch: int,
) -> int:  # fmt: skip
    """Embed every row of ``rows_of`` still without a vector, in batches, with a progress line."""
    table, page_key = rows_of.table, rows_of.key[0]
    total = await conn.fetchval(
        f"SELECT count(*) FROM {table} m WHERE {rows_of.pending} AND {where}", *args
    )
    n = len(args)
    key_match = " AND ".join(f"m.{column} = ${i + 2}" for i, column in enumerate(rows_of.key))
    update = f"""UPDATE {table} m SET embedding = ${len(rows_of.key) + 2},
                        embedding_model = ${len(rows_of.key) + 3}
                 WHERE m.tenant_id = $1 AND {key_match} AND {rows_of.pending}"""
    done, started = 0, time.monotonic()
    after = ("00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000")
    while True:
        rows = await conn.fetch(
            f"""SELECT m.tenant_id, {", ".join(f"m.{c}" for c in rows_of.key)}, {rows_of.columns}
                FROM {table} m
                WHERE {rows_of.pending} AND {where}
                  AND (m.tenant_id, m.{page_key}) > (${n + 1}::uuid, ${n + 2}::uuid)
                ORDER BY m.tenant_id, m.{page_key} LIMIT ${n + 3}""",
            *args,
            *after,
            batch,
        )
        if not rows:
            return done
        try:
            vectors = await embedder.embed([rows_of.text(r) for r in rows])
        except EmbedderError as exc:
            raise UsageError(f"embedder failed after {done} {rows_of.noun}: {exc}") from exc
        async with acting(conn):  # each batch commits: a failure later keeps it
            await conn.executemany(
                update,
                [
                    (r["tenant_id"], *(r[c] for c in rows_of.key), v, model)
                    for r, v in zip(rows, vectors, strict=True)
                ],
            )
        done += len(rows)
        after = (str(rows[-1]["tenant_id"]), str(rows[-1][page_key]))
        rate = done / max(time.monotonic() - started, 1e-6)
        pct = 100 * done / max(total, 1)
        print(
            f"\rbackfilled {done}/{total} {rows_of.noun} ({pct:.0f}%), {rate:.0f}/s",
            end="",
            file=sys.stderr,
        )


async def _backfill_memories(
    conn: asyncpg.Connection, embedder: Embedder, model: str | None, where: str,
    args: list[Any], batch: int,
) -> int:  # fmt: skip
    """Embed every current memory (or candidate) without a vector."""
    return await _backfill(conn, embedder, model, _MEMORY_VECTORS, where, args, batch)


async def _backfill_chunks(
    conn: asyncpg.Connection, embedder: Embedder, model: str | None, where: str,
    args: list[Any], batch: int,
) -> int:  # fmt: skip
    """Embed every current knowledge chunk without a vector (the embedder was down at put)."""
    return await _backfill(conn, embedder, model, _CHUNK_VECTORS, where, args, batch)


async def cmd_set_dimension(ctx: Context) -> None:
    dimension = ctx.args.dimension
    if not 1 <= dimension <= 16000:
        raise UsageError("dimension must be between 1 and 16000")
    if not ctx.args.yes:
        raise UsageError("this drops every stored vector; pass --yes to confirm")
    index_note = ""
    async with ctx.connect() as conn, acting(conn):
        # Memories and knowledge chunks share the dimension (one embedder serves both).
        for table in ("memories", "document_chunks"):
            await conn.execute(f"DROP INDEX IF EXISTS {table}_embedding_hnsw")
            await conn.execute(
                f"ALTER TABLE {table} ALTER COLUMN embedding TYPE vector({dimension}) USING NULL"
            )
            await conn.execute(f"UPDATE {table} SET embedding_model = NULL")
            if table == "document_chunks":  # they go with the vectors they came with
                await conn.execute("UPDATE document_chunks SET token_vectors = NULL")
            if dimension <= 2000:  # pgvector's HNSW limit for vector
                await conn.execute(
                    f"""CREATE INDEX {table}_embedding_hnsw ON {table}
                        USING hnsw (embedding vector_cosine_ops) WHERE retired_at IS NULL"""
                )
            else:
                index_note = " (over 2000 dimensions: no HNSW index, searches scan exactly)"

    output(
        ctx.args,
        {"dimension": dimension},
        f"vector column is now vector({dimension}){index_note}; run `embeddings backfill`",
    )
