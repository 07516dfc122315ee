"""Hybrid recall: a lexical lane and a semantic lane, each filtered in SQL, then fused.

Both lanes put the caller's visibility, status, expiry and time predicates inside their
own statement, before the LIMIT, so a crowded bucket cannot starve them.

- Lexical: Okapi BM25 computed in SQL over the ``english`` tsvector. Query terms are
  OR-ed (a question rarely shares every word with its answer) and weighted by inverse
  document frequency over the rows the caller can see.
- Semantic: pgvector cosine distance over the HNSW index with iterative scans, so a
  filtered search still returns its k rows; rows below a similarity floor are dropped so
  an unrelated query can return nothing.
- Fusion: each lane's scores are normalised to [0, 1] (BM25 by the best hit, cosine
  between the floor and the best hit) and combined with a weight per lane, plus a
  reciprocal-rank term, and small bounded boosts for importance and recency that reorder
  near-ties but cannot overturn a clearly better match.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from .storage.memories import (
    MEMORY_COLUMNS,
    RowFilter,
    TimeCoords,
    filter_predicate,
    time_predicate,
)
from .storage.visibility import Params, Visibility, visibility_predicate


@dataclass(frozen=True)
class RetrievalParams:
    """Tuned on the LoCoMo dev split only (see README, Retrieval)."""

    candidates: int = 50  # rows each lane contributes before fusion
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    lexical_weight: float = 0.5
    semantic_weight: float = 0.5
    rrf_k: float = 60.0
    rrf_weight: float = 0.0
    similarity_floor: float = 0.30
    importance_boost: float = 0.02  # at most this much for importance 1.0 vs 0.5
    recency_boost: float = 0.01  # at most this much for a memory recorded just now
    recency_half_life_days: float = 30.0
    ef_search: int = 100


@dataclass
class LaneHit:
    row: asyncpg.Record
    score: float


@dataclass
class FusedHit:
    row: asyncpg.Record
    score: float
    lexical_rank: int = 0
    semantic_rank: int = 0
    lexical_score: float = 0.0
    semantic_similarity: float = 0.0


async def lexical_lane(
    conn: asyncpg.Connection,
    v: Visibility,
    query: str,
    f: RowFilter,
    t: TimeCoords,
    limit: int,
    params: RetrievalParams,
) -> list[LaneHit]:
    """BM25 over the rows the caller may see; terms OR-ed, weighted by IDF."""
    p = Params(query)
    scope_sql = (
        f"{visibility_predicate(v, p)} AND {time_predicate(t, p)} AND {filter_predicate(f, p)}"
    )
    k1, b = p.add(params.bm25_k1), p.add(params.bm25_b)
    sql = f"""
        WITH terms AS (
            SELECT DISTINCT lexeme
            FROM unnest(tsvector_to_array(to_tsvector('english', $1))) AS lexeme
        ),
        q AS (
            SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS tsq FROM terms
        ),
        docs AS (
            SELECT m.tenant_id, m.memory_id, m.version, m.search_tsv,
                   length(m.search_tsv) AS dl
            FROM memories m, q
            WHERE q.tsq IS NOT NULL AND m.search_tsv @@ q.tsq AND {scope_sql}
        ),
        corpus AS (
            SELECT count(*)::float8 AS n, COALESCE(avg(length(m.search_tsv)), 1)::float8 AS avgdl
            FROM memories m WHERE {scope_sql}
        ),
        tf AS (
            SELECT d.tenant_id, d.memory_id, d.version, d.dl, u.lexeme,
                   cardinality(u.positions)::float8 AS tf
            FROM docs d, unnest(d.search_tsv) AS u
            WHERE u.lexeme IN (SELECT lexeme FROM terms)
        ),
        df AS (SELECT lexeme, count(*)::float8 AS df FROM tf GROUP BY lexeme),
        scored AS (
            SELECT tf.tenant_id, tf.memory_id, tf.version,
                   sum(ln(1 + (c.n - df.df + 0.5) / (df.df + 0.5))
                       * tf.tf * ({k1} + 1)
                       / (tf.tf + {k1} * (1 - {b} + {b} * tf.dl / GREATEST(c.avgdl, 1)))) AS score
            FROM tf JOIN df USING (lexeme), corpus c
            GROUP BY tf.tenant_id, tf.memory_id, tf.version
            ORDER BY score DESC
            LIMIT {p.add(limit)}
        )
        SELECT {MEMORY_COLUMNS}, s.score
        FROM scored s JOIN memories m USING (tenant_id, memory_id, version)
        ORDER BY s.score DESC, m.memory_id"""
    rows = await conn.fetch(sql, *p.values)
    return [LaneHit(row=r, score=float(r["score"])) for r in rows]


async def semantic_lane(
    conn: asyncpg.Connection,
    v: Visibility,
    vector: Sequence[float],
    f: RowFilter,
    t: TimeCoords,
    limit: int,
    params: RetrievalParams,
    model: str | None = None,
) -> list[LaneHit]:
    """Nearest neighbours by cosine, filtered in the scan; below the floor is dropped."""
    # Iterative scans keep walking the HNSW graph until `limit` rows pass the filters.
    await conn.execute(
        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
        "set_config('hnsw.ef_search', $1, true)",
        str(max(params.ef_search, limit)),
    )
    p = Params(list(vector))
    same_model = f"AND m.embedding_model = {p.add(model)}" if model else ""
    sql = f"""
        SELECT * FROM (
            SELECT {MEMORY_COLUMNS}, 1 - (m.embedding <=> $1::vector) AS similarity
            FROM memories m
            WHERE m.embedding IS NOT NULL {same_model}
              AND {visibility_predicate(v, p)} AND {time_predicate(t, p)}
              AND {filter_predicate(f, p)}
            ORDER BY m.embedding <=> $1::vector
            LIMIT {p.add(limit)}
        ) hits
        WHERE similarity >= {p.add(params.similarity_floor)}
        ORDER BY similarity DESC"""
    rows = await conn.fetch(sql, *p.values)
    return [LaneHit(row=r, score=float(r["similarity"])) for r in rows]


def _key(row: asyncpg.Record) -> Any:
    return (row["memory_id"], row["version"])


def fuse(
    lexical: Sequence[LaneHit],
    semantic: Sequence[LaneHit],
    limit: int,
    params: RetrievalParams,
    now: datetime | None = None,
) -> list[FusedHit]:
    """Combine both lanes into one ranking (see the module docstring)."""
    now = now or datetime.now(UTC)
    fused: dict[Any, FusedHit] = {}
    best_lex = max((h.score for h in lexical), default=0.0)
    best_sem = max((h.score for h in semantic), default=0.0)
    span_sem = best_sem - params.similarity_floor
    for rank, hit in enumerate(lexical, start=1):
        item = fused.setdefault(_key(hit.row), FusedHit(row=hit.row, score=0.0))
        item.lexical_rank, item.lexical_score = rank, hit.score
        norm = hit.score / best_lex if best_lex > 0 else 0.0
        item.score += params.lexical_weight * norm + params.rrf_weight / (params.rrf_k + rank)
    for rank, hit in enumerate(semantic, start=1):
        item = fused.setdefault(_key(hit.row), FusedHit(row=hit.row, score=0.0))
        item.semantic_rank, item.semantic_similarity = rank, hit.score
        norm = (hit.score - params.similarity_floor) / span_sem if span_sem > 0 else 1.0
        item.score += params.semantic_weight * norm + params.rrf_weight / (params.rrf_k + rank)
    for item in fused.values():
        item.score += boost(item.row, params, now)
    ranked = sorted(fused.values(), key=lambda h: (-h.score, str(h.row["memory_id"])))
    return ranked[:limit]


def boost(row: asyncpg.Record, params: RetrievalParams, now: datetime) -> float:
    """Bounded nudges: importance above/below 0.5, and recency of the version."""
    importance = params.importance_boost * 2 * (float(row["importance"]) - 0.5)
    age_days = max(0.0, (now - row["recorded_at"]).total_seconds() / 86400)
    recency = params.recency_boost * math.exp(
        -math.log(2) * age_days / params.recency_half_life_days
    )
    return importance + recency
