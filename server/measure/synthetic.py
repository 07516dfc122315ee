"""A synthetic, Zipf-distributed corpus filled straight through SQL, for the benchmarks."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence

import asyncpg

from brain.server.measure.private import PrivateBrain
from brain.server.runtime.embedded import machine_memory

VOCABULARY = 20_000
NAMESPACE = "bench"


def sentence(rng: random.Random, words: int) -> str:
    """Words drawn with Zipf-like frequencies: w17 is common, w19870 rare."""
    return " ".join(f"w{int(rng.paretovariate(1.1)) % VOCABULARY}" for _ in range(words))


# One statement: the same Zipf vocabulary as `sentence`, 8 to 30 words per memory, and,
# when the bucket has an embedder, a vector per row: the mean of the embedding model's
# vectors of its words (table ``bench_words``, filled from `vocabulary`), so rows sharing
# words lie close together as real embeddings do, and the query (embedded by the server)
# is compared in the same space. Embedding every row would take minutes per 100,000 rows.
FILL_SQL = """
    INSERT INTO memories (tenant_id, memory_id, version, namespace, content, labels, status,
                          valid_from, created_by, changed_by, changed_by_key, change,
                          embedding, embedding_model)
    SELECT $1, gen_random_uuid(), 1, $5, c.content,
           '{team}', 'active', now(), 'bench', 'bench', 'bench', 'save',
           CASE WHEN $3::int > 0 THEN
               (SELECT avg(b.v) FROM unnest(string_to_array(c.content, ' ')) AS w
                JOIN bench_words b ON b.word = lower(w))
           END,
           CASE WHEN $3::int > 0 THEN $7::text END
    FROM (SELECT (SELECT string_agg(CASE WHEN $8::int > 0 AND x.n >= $8::int THEN 'W'
                                         ELSE 'w' END || x.n, ' ')
                  FROM (SELECT floor(power(1 - random(), -1 / 1.1))::bigint % $4::int AS n
                        FROM generate_series(1, 8 + (g::bigint * 7919 + $6::int) % 23)) x)
                 AS content
          FROM generate_series(1, $2::int) g) c"""


# Word i is drawn with probability about i^-2.1: the 2,000 most frequent words make up
# 99.98% of the words drawn, and a row's vector averages those of its words among them.
EMBEDDED_WORDS = 2_000


def vocabulary(count: int = EMBEDDED_WORDS) -> list[str]:
    """The words whose vectors make up the rows' vectors (the most frequent first)."""
    return [f"w{i}" for i in range(count)]


async def fill(
    owner_dsn: str,
    tenant: str,
    target: int,
    dimension: int,
    seed: int = 7,
    model: str = "",
    word_vectors: Sequence[Sequence[float]] = (),
    names_from: int = 0,
) -> dict[str, float]:
    """Fill the tenant's bucket ``bench`` up to ``target`` current memories, in one statement.

    With a ``dimension``, each row's vector is the mean of ``word_vectors`` (the model's
    vectors of `vocabulary`, in order) over its words, stored as made by ``model`` (the
    server's embedding model id): the semantic lane compares only vectors of the model
    that embeds the query.

    With ``names_from`` > 0, words of that frequency rank and rarer are written capitalised
    ("W123"), as names: the second retrieval round (two hops) then has names to add, as
    in real text. Lexical matching ignores case, so only that round sees a difference.

    With vectors, the HNSW index is dropped first and built again afterwards, so the fill
    measures what building it costs (``hnsw_build_s``) instead of slow row-by-row inserts.
    """
    conn = await asyncpg.connect(owner_dsn)
    out: dict[str, float] = {}
    try:
        tenant_id = await conn.fetchval("SELECT tenant_id FROM tenants WHERE name = $1", tenant)
        rows = target - await conn.fetchval(
            "SELECT count(*) FROM memories WHERE tenant_id = $1 AND namespace = $2"
            " AND retired_at IS NULL",
            tenant_id,
            NAMESPACE,
        )
        await conn.execute(
            f"CREATE TEMP TABLE bench_words (word text PRIMARY KEY, v vector({dimension or 1}))"
        )
        if dimension:
            await conn.executemany(
                "INSERT INTO bench_words VALUES ($1, $2::vector)",
                [(word, "[" + ",".join(map(repr, vector)) + "]")
                 for word, vector in zip(vocabulary(len(word_vectors)), word_vectors, strict=True)],
            )  # fmt: skip
        await conn.execute("SELECT setseed($1)", (seed % 1000) / 1000)
        hnsw = None
        if dimension:
            hnsw = await conn.fetchval(
                "SELECT pg_get_indexdef('memories_embedding_hnsw'::regclass)"
            )
            await conn.execute("DROP INDEX memories_embedding_hnsw")
        started = time.perf_counter()
        forced = await _forced_on_citus(conn)
        for table in forced:
            await conn.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        try:
            # Term statistics are counted once for the whole load, not row by row.
            await conn.execute("ALTER TABLE memories DISABLE TRIGGER memories_lexical_stats")
            try:
                await conn.execute(
                    FILL_SQL,
                    tenant_id,
                    rows,
                    dimension,
                    VOCABULARY,
                    NAMESPACE,
                    seed,
                    model,
                    names_from,
                )
            finally:
                await conn.execute("ALTER TABLE memories ENABLE TRIGGER memories_lexical_stats")
            out["fill_s"] = round(time.perf_counter() - started, 1)
            started = time.perf_counter()
            await conn.execute("SELECT brain_rebuild_lexical_stats($1)", tenant_id)
            out["stats_s"] = round(time.perf_counter() - started, 1)
        finally:
            for table in forced:
                await conn.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        out["inserted"] = max(rows, 0)
        if hnsw is not None:
            vectors = await conn.fetchval(
                "SELECT count(*) FROM memories WHERE embedding IS NOT NULL"
            )
            out["build_memory_mb"] = build_memory_mb(vectors, dimension)
            started = time.perf_counter()
            await conn.execute(f"SET maintenance_work_mem = '{out['build_memory_mb']}MB'")
            await conn.execute(hnsw)
            out["hnsw_build_s"] = round(time.perf_counter() - started, 1)
            out["hnsw_mb"] = round(
                await conn.fetchval(
                    "SELECT pg_relation_size('memories_embedding_hnsw') / 1048576.0::float8"
                ),
                1,
            )
        await conn.execute("ANALYZE memories")
    finally:
        await conn.close()
    return out


async def _forced_on_citus(conn: asyncpg.Connection) -> list[str]:
    """On a Citus coordinator, the bulk-loaded tables that have FORCE ROW LEVEL SECURITY.

    Citus writes an ``INSERT ... SELECT`` of many rows through COPY, which row-level
    security refuses; the owner's load goes in with FORCE off and puts it back (the app
    role's policies never change). Empty on plain PostgreSQL."""
    rows = await conn.fetch(
        """SELECT c.relname FROM pg_class c
           WHERE c.relname IN ('memories', 'lexical_cells', 'lexical_terms')
             AND c.relnamespace = 'public'::regnamespace AND c.relforcerowsecurity
             AND EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"""
    )
    return [r["relname"] for r in rows]


def build_memory_mb(vectors: int, dimension: int) -> int:
    """``maintenance_work_mem`` that holds the HNSW graph while it is built: each element
    keeps its vector and about 512 bytes of neighbour lists (m = 16), plus a tenth. A graph
    that outgrows it is built on from disk, many times slower. From 512 MB to a quarter of
    memory."""
    graph = vectors * (dimension * 4 + 512) * 11 // 10 // 2**20
    return int(max(512, min(graph, machine_memory() // 4 // 2**20)))


async def tenant_of(brain: PrivateBrain, api_key: str) -> str:
    """The tenant name of a key minted by ``brain.bucket``."""
    conn = await asyncpg.connect(brain.owner_dsn)
    try:
        name: str = await conn.fetchval(
            "SELECT t.name FROM api_keys k JOIN tenants t USING (tenant_id) WHERE k.key_id = $1",
            api_key.split("_")[1],
        )
        return name
    finally:
        await conn.close()
