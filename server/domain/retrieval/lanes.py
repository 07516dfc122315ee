"""Hybrid recall: lexical and semantic lanes, each filtered in SQL, then fused.

Every lane puts the caller's visibility, status, expiry and time predicates inside its
own statement, before the LIMIT, so a crowded bucket cannot starve it.

- Lexical (two lanes): Okapi BM25 computed in SQL, over the ``english`` tsvector (stems,
  no stop words) and, lighter, over the ``simple`` one (exact forms). Query terms are
  OR-ed (a question rarely shares every word with its answer) and weighted by inverse
  document frequency over the rows the caller can see.
- Semantic: pgvector cosine distance over the HNSW index with iterative scans, so a
  filtered search still returns its k rows; rows below a similarity floor are dropped so
  an unrelated query can return nothing. In hybrid mode the query vector is first moved
  toward the best lexical hits (pseudo-relevance feedback, Rocchio style).
- Fusion: by default hits are ordered by a small model fitted listwise on the lanes'
  scores and ranks (`relevance`), which also gives each hit a calibrated relevance that
  the search's floor compares; hand-weighted min-max or reciprocal-rank fusion remain as
  options. Small bounded boosts for importance and recency reorder near-ties but cannot
  overturn a clearly better match.

The models were fitted on the LoCoMo dev split; ``brain-eval locomo --folds`` refits them
leave-one-conversation-out to show how much of that carries over (docs: Retrieval). An
optional reranker (`rerankers`) may reorder the fused top N. The lanes' SQL lives in
``storage/retrieval.py`` (the graph lane's in ``storage/graph.py``): this module decides
what to read and how to rank it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import numpy as np

from brain.server.domain.graph.assertions import query_names
from brain.server.domain.retrieval.relevance import (
    HYBRID_MODEL,
    HYBRID_MODELS,
    LEXICAL_MODEL,
    LaneView,
    RelevanceModel,
    feature_rows,
)
from brain.server.storage import graph as graph_sql
from brain.server.storage import retrieval as sql
from brain.server.storage.memories import RowFilter, TimeCoords, shown_rows
from brain.server.storage.retrieval import (
    MEMORIES,
    TSVECTORS,
    Corpus,
    LanePlan,
    Where,
    memory_where,
    rows_in,
)
from brain.server.storage.visibility import Visibility
from brain.server.telemetry import metrics

__all__ = [
    "MEMORIES",
    "TSVECTORS",
    "Corpus",
    "FusedHit",
    "LaneHit",
    "LanePlan",
    "LexicalHits",
    "RetrievalParams",
    "Where",
    "bm25_lane",
    "boost",
    "corpus_size",
    "feedback_vector",
    "fuse",
    "graph_lane",
    "hybrid_model",
    "lexical_lane",
    "lexical_lanes",
    "memory_where",
    "nearest_lane",
    "plan_lane",
    "rows_in",
    "semantic_lane",
    "shown",
    "uses_term_statistics",
]


@dataclass(frozen=True)
class RetrievalParams:
    """Tuned on the LoCoMo dev split only (see README, Retrieval)."""

    candidates: int = 50  # rows each lane contributes before fusion
    # Turns and notes are short: length normalisation (b) only hurt on the dev split.
    bm25_k1: float = 1.0
    bm25_b: float = 0.0
    lexical_weight: float = 0.6
    exact_weight: float = 0.2  # the `simple` lexical lane
    semantic_weight: float = 0.4
    feedback_weight: float = 0.5  # how far the query vector moves toward the lexical top hits
    feedback_docs: int = 3
    similarity_floor: float = 0.30
    importance_boost: float = 0.02  # at most this much for importance 1.0 vs 0.5
    recency_boost: float = 0.01  # at most this much for a memory recorded just now
    recency_half_life_days: float = 30.0
    ef_search: int = 100
    # The candidate budget: terms pull rows in rarest first while their document
    # frequencies fit in it (see lexical_lanes; lexical_lane also stops counting there).
    # 1000 rather than 2000 scores half the rows and kept dev-split recall@10 (README).
    lexical_df_cap: int = 1000
    # How a lane's hits count: "minmax" (scores scaled to 0..1) or "rrf" (1/(rrf_k + rank),
    # scaled so rank 1 counts 1), weighted per lane; or "learned": hits ordered by the
    # relevance model's probability. brain-eval --folds compares them under cross-validation.
    fusion: str = "learned"
    rrf_k: int = 60
    # The entity graph lane (issue 19): memories mentioning entities the query names, and
    # (weighted down) their one-hop neighbours. Off (0) by default: on the dev split with
    # extracted entities it did not help (README, Retrieval); --graph-lane-weight 0.3 turns
    # it on for deployments whose agents assert entities.
    graph_weight: float = 0.0
    graph_neighbour_weight: float = 0.5
    # Two hops (issue 34, see `hops`): a second lexical round with at most `hop_entities`
    # names that the first round's best `hop_hits` hits mention and the query does not
    # (0: none), and a second semantic round with the query vector plus
    # `hop_vector_weight` x the mean of those hits' vectors (0: none). Their ranks and
    # gaps are features of the learned order; `hop_weight` is their weight in the min-max
    # and reciprocal-rank fusions. Both off: on the dev split neither moved held-out
    # recall (docs: Performance, Two hops); --hop-entities and --hop-vector-weight turn
    # them on.
    hop_entities: int = 0
    hop_hits: int = 3
    hop_weight: float = 0.0
    hop_vector_weight: float = 0.0
    # Whether hits asserting an entity the query names are marked (feature `named`).
    named_entities: bool = True
    # Whether the semantic lane of a hybrid search reads the query without the names of
    # the people the caller's memories assert (`assertions.without_names`): MiniLM let
    # "Melanie" outweigh "what activities" (docs: Performance, Names apart).
    names_apart: bool = True
    # Every hit's relevance (0..1) comes from these models (see `relevance`); a search
    # returns only hits at or above the model's floor unless the request sets its own.
    lexical_model: RelevanceModel = LEXICAL_MODEL
    hybrid_model: RelevanceModel = HYBRID_MODEL
    # The default floor applies once the lexical lanes ran over this many rows. A memory
    # search's N counts at least `prior_rows`, so it always applies there, except to a
    # semantic-only search (no lexical lane: it keeps its similarity floor); knowledge
    # search counts its chunks as they are. Measured in docs (Retrieval, Languages): the
    # floor off under 50 memories left 0-6% of unanswerable questions silent in buckets
    # of eight.
    floor_min_rows: int = 50
    # BM25 counts at least this many rows (N in the IDF and in the features' rare-term
    # unit): in a bucket of three notes that all say "alpha", "alpha" is not common, just
    # unseen elsewhere yet, so every note is found. LoCoMo's buckets (about 550 turns) are
    # well above it.
    prior_rows: int = 50
    # For a question about now, a newer statement of a changed value ranks just above the
    # older one (`updates.current_first`); False only to measure without it
    # (brain-eval updates).
    current_first: bool = True


def hybrid_model(params: RetrievalParams, embedding_model: str | None) -> RelevanceModel:
    """The hybrid relevance model for vectors of ``embedding_model`` (``name:model``): the
    one fitted with that embedder, unless ``params`` carry a model of their own."""
    embedder = (embedding_model or "").split(":", 1)[0]
    if params.hybrid_model is HYBRID_MODEL and embedder in HYBRID_MODELS:
        return HYBRID_MODELS[embedder]
    return params.hybrid_model


@dataclass
class LaneHit:
    row: asyncpg.Record
    score: float
    coverage: float = 0.0  # lexical lanes: score / the query's whole IDF mass, at most 1
    query_similarity: float = 0.0  # semantic lane: cosine to the query's own vector


@dataclass
class FusedHit:
    row: asyncpg.Record
    score: float
    lexical_rank: int = 0
    semantic_rank: int = 0
    lexical_score: float = 0.0
    semantic_similarity: float = 0.0
    exact_rank: int = 0
    exact_score: float = 0.0
    coverage: float = 0.0
    # The graph lane's rank: the memory asserts an entity the query names (0: not found so).
    graph_rank: int = 0
    # The second round's rank and BM25 score (0: it did not find the hit; see `hops`).
    hop_rank: int = 0
    hop_score: float = 0.0
    named: bool = False  # the memory asserts an entity the query names
    # The second round's semantic rank and similarity (0: it did not find the hit).
    again_rank: int = 0
    again_similarity: float = 0.0
    relevance: float = 0.0  # the relevance model's probability (see `relevance`)
    rerank_score: float = 0.0  # set when a reranker ordered the hit
    reading: float = 0.0  # knowledge: the best cosine to one of its sentences (0: not read)
    # The semantic lane ran, but the row has no vector of its model yet (the backfill has
    # not reached it): its relevance and order are the lexical model's (see `fuse`).
    vectorless: bool = False

    def lanes(self, session: str = "valid_from") -> LaneView:
        """The lanes' view of the hit; ``session`` names the column that groups hits."""
        return LaneView(
            lexical_score=self.lexical_score,
            lexical_rank=self.lexical_rank,
            exact_score=self.exact_score,
            exact_rank=self.exact_rank,
            semantic_similarity=self.semantic_similarity,
            semantic_rank=self.semantic_rank,
            session=self.row.get(session),
            coverage=self.coverage,
            hop_score=self.hop_score,
            hop_rank=self.hop_rank,
            named=self.named,
            again_similarity=self.again_similarity,
            again_rank=self.again_rank,
            reading=self.reading,
        )


async def lexical_lane(
    conn: asyncpg.Connection,
    v: Visibility,
    query: str,
    f: RowFilter,
    t: TimeCoords,
    limit: int,
    params: RetrievalParams,
    config: str = "english",
    corpus_size: int | None = None,
) -> list[LaneHit]:
    """BM25 over the memories the caller may see; terms OR-ed, weighted by IDF.

    ``corpus_size`` (from `corpus_size`) saves counting the visible rows again.
    """
    return await bm25_lane(
        conn, MEMORIES, v, memory_where(v, f, t), query, limit, params, config, corpus_size
    )


async def bm25_lane(
    conn: asyncpg.Connection,
    corpus: Corpus,
    v: Visibility,
    where: Where,
    query: str,
    limit: int,
    params: RetrievalParams,
    config: str = "english",
    corpus_size: int | None = None,
) -> list[LaneHit]:
    """BM25 over the rows of ``corpus`` that pass ``where``; terms OR-ed, weighted by IDF."""
    with metrics.lane("lexical" if config == "english" else "exact"):
        rows = await sql.bm25_rows(
            conn, corpus, v, where, query, limit, bm25(params), config, corpus_size
        )
    return [
        LaneHit(row=r, score=float(r["score"]), coverage=share(r["score"], r["mass"], r["n"]))
        for r in rows
    ]


def share(score: float, mass: float, n: float) -> float:
    """How much of the query's IDF mass a hit's BM25 score covers, 0..1; the mass counts
    as at least one rare term's weight (a term in one row of ``n``), so a query of common
    words alone covers little however many of them a hit holds."""
    rare = math.log1p((max(float(n), 1.0) - 0.5) / 1.5)
    return min(1.0, float(score) / max(float(mass or 0.0), rare)) if rare > 0 else 0.0


def bm25(params: RetrievalParams) -> sql.Bm25:
    return sql.Bm25(params.bm25_k1, params.bm25_b, params.lexical_df_cap, params.candidates)


def uses_term_statistics(f: RowFilter, t: TimeCoords) -> bool:
    """Whether the kept term statistics describe what this search runs over: they count
    current active rows, so a search of the past or of other statuses counts instead."""
    return t.as_of is None and list(f.statuses) == ["active"]


async def lexical_lanes(
    conn: asyncpg.Connection,
    v: Visibility,
    query: str,
    f: RowFilter,
    t: TimeCoords,
    limit: int,
    params: RetrievalParams,
    *,
    configs: Sequence[str] = tuple(TSVECTORS),
) -> LexicalHits:
    """Both BM25 lanes (``english``, ``simple``; or those of ``configs``) from kept
    statistics, in two statements.

    Document frequencies and the corpus size are sums of the write-time counts of the
    visibility cells the caller may see (migration 0010), never of other cells, so they
    cost a few index lookups whatever the bucket's size. The first statement reads them;
    the terms to draw candidates from are then chosen here (`plan_lane`), so the second
    statement carries them as a constant query the planner can see: candidates come
    through the GIN index from the rarest query terms first, as many terms as fit
    ``lexical_df_cap`` rows (always the rarest one); when the rarest term alone is over
    the budget, its rows holding the next rarest term too, then (only to fill up to
    ``4 x candidates``) more of its rows; when even the rarest term is in a twentieth of
    the rows and over the budget, the newest ``4 x candidates`` visible rows holding it
    are scored instead. When both lanes draw alike (both within the budget, or both
    unspecific), their rows are read once for both. Every choice depends only on rows and
    statistics the caller may see.
    """
    stats = await sql.term_statistics(conn, v, query, configs)
    plans = [
        plan_lane(c, [(r["lexeme"], r["df"], r["len"]) for r in stats if r["config"] == c], params)
        for c in configs
    ]  # fmt: skip
    searched = int(max(plan.n for plan in plans))
    plans = [plan for plan in plans if plan.weights]
    if not plans:
        return LexicalHits([], [], searched)
    with metrics.lane("lexical"):
        rows, crowded = await sql.candidate_rows(conn, v, plans, f, t, limit, bm25(params))
        for plan in crowded:  # rare: unspecific lanes drawing different terms
            alone, _ = await sql.candidate_rows(conn, v, [plan], f, t, limit, bm25(params))
            rows = [r for r in rows if r["lane"] != plan.config] + alone
    lanes: dict[str, list[LaneHit]] = {"english": [], "simple": []}
    plan_of = {plan.config: plan for plan in plans}
    for r in rows:
        plan = plan_of[r["lane"]]
        lanes[r["lane"]].append(
            LaneHit(row=r, score=float(r["score"]), coverage=share(r["score"], plan.mass, plan.n))
        )
    # N also when nothing matched: the relevance floor then still applies (issue 34: a
    # query whose words no memory holds used to switch it off). Fusion is unchanged: N
    # only scales lexical scores, and there are none.
    return LexicalHits(lanes["english"], lanes["simple"], searched)


@dataclass(frozen=True)
class LexicalHits:
    english: list[LaneHit]
    simple: list[LaneHit]
    searched_rows: int  # N, the current active rows the caller may see


def plan_lane(
    config: str, stats: Sequence[tuple[str, float, float]], params: RetrievalParams
) -> LanePlan:
    """The lane's plan from (lexeme, df, total length) of each query term in the cells the
    caller may see, lexeme '' giving the row count and total length."""
    rows, total = next(((df, length) for lexeme, df, length in stats if lexeme == ""), (0.0, 0.0))
    avgdl = total / rows if rows > 0 else 1.0
    n = max(rows, float(params.prior_rows)) if rows > 0 else 0.0
    terms = sorted((df, lexeme) for lexeme, df, _ in stats if lexeme and df > 0)
    budget = params.lexical_df_cap
    drawn: list[str] = []
    running = 0.0
    for df, lexeme in terms:
        running += df
        if running <= budget or not drawn:
            drawn.append(lexeme)
    over_budget = bool(terms) and terms[0][0] > budget
    common = over_budget and terms[0][0] * 20 > n
    weights = tuple((lexeme, math.log(1 + (n - df + 0.5) / (df + 0.5))) for df, lexeme in terms)
    # Every query term's weight, those no row holds at the rarest: what a hit could match.
    mass = sum(math.log(1 + (n - df + 0.5) / (df + 0.5)) for lexeme, df, _ in stats if lexeme)
    draw = " | ".join(quote_lexeme(lexeme) for lexeme in drawn)
    pair = ""
    if over_budget and not common and len(terms) > 1:
        pair = f"{quote_lexeme(terms[0][1])} & {quote_lexeme(terms[1][1])}"
    return LanePlan(config, n, avgdl, draw, common, weights, over_budget, pair, mass)


def quote_lexeme(lexeme: str) -> str:
    """A lexeme as a tsquery operand, matched as it is (PostgreSQL's quote_literal)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


async def corpus_size(
    conn: asyncpg.Connection,
    v: Visibility,
    f: RowFilter,
    t: TimeCoords,
    params: RetrievalParams | None = None,
) -> int:
    """N in BM25's inverse document frequency: how many memories the search runs over, at
    least ``prior_rows`` (when any)."""
    rows = await rows_in(conn, MEMORIES, memory_where(v, f, t))
    prior = (params or RetrievalParams()).prior_rows
    return max(rows, prior) if rows else 0


async def semantic_lane(
    conn: asyncpg.Connection,
    v: Visibility,
    vector: Sequence[float],
    f: RowFilter,
    t: TimeCoords,
    limit: int,
    params: RetrievalParams,
    model: str | None = None,
    query: Sequence[float] | None = None,
) -> list[LaneHit]:
    """Nearest memories by cosine, filtered in the scan; below the floor is dropped. Each
    hit's ``query_similarity`` is its cosine to ``query`` (the query's own vector, before
    feedback moved it), or to ``vector``."""
    return await nearest_lane(
        conn, MEMORIES, v, memory_where(v, f, t), vector, limit, params, model, query
    )


async def nearest_lane(
    conn: asyncpg.Connection,
    corpus: Corpus,
    v: Visibility,
    where: Where,
    vector: Sequence[float],
    limit: int,
    params: RetrievalParams,
    model: str | None = None,
    query: Sequence[float] | None = None,
) -> list[LaneHit]:
    """Nearest neighbours by cosine, filtered in the scan; below the floor is dropped."""
    with metrics.lane("semantic"):
        rows = await sql.nearest_rows(
            conn, corpus, v, where, vector, limit, ef_search=params.ef_search,
            similarity_floor=params.similarity_floor, model=model, query=query,
        )  # fmt: skip
    return [
        LaneHit(row=r, score=float(r["similarity"]), query_similarity=float(r["query_similarity"]))
        for r in rows
    ]


async def graph_lane(
    conn: asyncpg.Connection,
    v: Visibility,
    query: str,
    f: RowFilter,
    t: TimeCoords,
    limit: int,
    params: RetrievalParams,
) -> list[LaneHit]:
    """Memories about the entities the query names (see `storage.graph.graph_lane`)."""
    names = query_names(query)
    if not names or params.graph_weight <= 0:
        return []
    with metrics.lane("graph"):
        rows = await graph_sql.graph_lane(
            conn, v, names, f, t, limit, params.graph_neighbour_weight
        )
    return [LaneHit(row=r, score=float(r["score"])) for r in rows]


def _reciprocal(hits: Sequence[LaneHit], k: int) -> list[float]:
    return [(k + 1) / (k + rank) for rank in range(1, len(hits) + 1)]


def _minmax(hits: Sequence[LaneHit]) -> list[float]:
    if not hits:
        return []
    low, high = min(h.score for h in hits), max(h.score for h in hits)
    return [(h.score - low) / (high - low) if high > low else 1.0 for h in hits]


async def feedback_vector(
    conn: asyncpg.Connection,
    v: Visibility,
    vector: Sequence[float],
    lexical: Sequence[LaneHit],
    params: RetrievalParams,
    model: str | None,
    corpus: Corpus = MEMORIES,
    where: Where | None = None,
) -> list[float]:
    """The query vector moved toward the embeddings of the best lexical hits."""
    top = [h.row for h in lexical[: params.feedback_docs]]
    if not top or params.feedback_weight <= 0:
        return list(vector)
    rows = await sql.embeddings_of(conn, v, top, model, corpus, where)
    if not rows:
        return list(vector)
    hits = np.array([row["embedding"].to_numpy() for row in rows], dtype=np.float64)
    mixed = np.asarray(vector, dtype=np.float64) + params.feedback_weight * hits.mean(axis=0)
    norm = float(np.sqrt(mixed @ mixed)) or 1.0
    return [float(x) for x in mixed / norm]


def fuse(
    lexical: Sequence[LaneHit],
    semantic: Sequence[LaneHit],
    limit: int | None,
    params: RetrievalParams,
    now: datetime | None = None,
    exact: Sequence[LaneHit] = (),
    corpus: Corpus = MEMORIES,
    graph: Sequence[LaneHit] = (),
    *,
    hop: Sequence[LaneHit] = (),
    named: frozenset[Any] = frozenset(),
    again: Sequence[LaneHit] = (),
    corpus_size: int = 0,
    model: RelevanceModel | None = None,
    vectors: str | None = None,
) -> list[FusedHit]:
    """Combine the lanes into one ranking (see the module docstring); ``limit`` None
    keeps every candidate. Each hit's relevance comes from ``model`` (by default the
    hybrid model when the semantic lane found anything, else the lexical one); with
    ``vectors``, the embedding model the semantic lane compared, a hit without a vector
    of it gets the lexical model's relevance and order, and is marked ``vectorless``."""
    now = now or datetime.now(UTC)
    fused: dict[Any, FusedHit] = {}
    lanes = (
        ("lexical", lexical, params.lexical_weight),
        ("exact", exact, params.exact_weight),
        ("semantic", semantic, params.semantic_weight),
        ("graph", graph, params.graph_weight),
        ("hop", hop, params.hop_weight),
        ("again", again, params.hop_weight),
    )
    for kind, hits, weight in lanes:
        norms = _reciprocal(hits, params.rrf_k) if params.fusion == "rrf" else _minmax(hits)
        for rank, (hit, norm) in enumerate(zip(hits, norms, strict=True), start=1):
            item = fused.setdefault(corpus.key(hit.row), FusedHit(row=hit.row, score=0.0))
            item.score += weight * norm
            if kind == "lexical":
                item.lexical_rank, item.lexical_score = rank, hit.score
                item.coverage = hit.coverage
            elif kind == "exact":
                item.exact_rank, item.exact_score = rank, hit.score
            elif kind == "semantic":
                item.semantic_rank, item.semantic_similarity = rank, hit.score
            elif kind == "hop":
                item.hop_rank, item.hop_score = rank, hit.score
            elif kind == "again":
                item.again_rank, item.again_similarity = rank, hit.score
            else:
                item.graph_rank = rank
    items = list(fused.values())
    if named:  # memory ids (knowledge chunks are never marked)
        for item in items:
            item.named = item.row["memory_id"] in named
    model = model or (params.hybrid_model if semantic else params.lexical_model)
    features = feature_rows(
        [item.lanes(corpus.session) for item in items], corpus_size or len(items)
    )
    probabilities, scores = model.probabilities(features), model.order_scores(features)
    if semantic and vectors is not None and items:
        # A row the semantic lane could not see (no vector of its model yet) has no cosine
        # to weigh: the hybrid model would read the missing one as "unrelated" and bury or
        # silence it. The lexical model, fitted without cosines, weighs what it has.
        blind = np.array([item.row["embedding_model"] != vectors for item in items])
        if blind.any():
            words_only = params.lexical_model
            probabilities = np.where(blind, words_only.probabilities(features), probabilities)
            scores = np.where(blind, words_only.order_scores(features), scores)
            for item, unseen in zip(items, blind, strict=True):
                item.vectorless = bool(unseen)
    order = 1.0 / (1.0 + np.exp(-scores))  # 0..1, same order
    for item, probability, learned in zip(items, probabilities, order, strict=True):
        item.relevance = float(probability)
        if params.fusion == "learned":
            item.score = float(learned)
        item.score += boost(item.row, params, now)
    ranked = sorted(items, key=lambda h: (-h.score, *corpus.tie(h.row)))
    return ranked if limit is None else ranked[:limit]


def reaches(hits: Sequence[FusedHit], floor: float, vectorless_floor: float) -> bool:
    """Whether some hit reaches its model's floor: ``floor``, or ``vectorless_floor`` for a
    hit `fuse` scored with the lexical model (``vectorless``)."""
    return any(h.relevance >= (vectorless_floor if h.vectorless else floor) for h in hits)


async def shown(conn: asyncpg.Connection, v: Visibility, hits: list[FusedHit]) -> list[FusedHit]:
    """The memory hits with every column a caller is shown, in their order (the lanes read
    only what ranking needs)."""
    rows = await shown_rows(conn, v, [(h.row["tenant_id"], h.row["memory_id"], h.row["version"])
                                      for h in hits])  # fmt: skip
    kept = []
    for hit in hits:
        row = rows.get((hit.row["tenant_id"], hit.row["memory_id"], hit.row["version"]))
        if row is not None:  # always, in the transaction that ranked it
            hit.row = row
            kept.append(hit)
    return kept


def boost(row: asyncpg.Record, params: RetrievalParams, now: datetime) -> float:
    """Bounded nudges: importance above/below 0.5, and recency of the version."""
    importance = params.importance_boost * 2 * (float(row["importance"]) - 0.5)
    age_days = max(0.0, (now - row["recorded_at"]).total_seconds() / 86400)
    recency = params.recency_boost * math.exp(
        -math.log(2) * age_days / params.recency_half_life_days
    )
    return importance + recency
