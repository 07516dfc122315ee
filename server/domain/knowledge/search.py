"""Knowledge search: ranked chunks, each with a calibrated relevance, and silence below a floor.

A search runs the memories' lanes over the chunks of current documents (BM25 over the
``english`` and ``simple`` text, the semantic lane with pseudo-relevance feedback), each
filtered by visibility and collection inside its statement before its LIMIT, and fuses them
with the same machinery (`retrieval.lanes.fuse`). Hits of one document count as one
"session" for the order's support features.

Every hit carries a relevance: the probability that it answers the query, from a logistic
model over its own match strength (`retrieval.relevance`), fitted on chunks rather than
conversation turns (`KNOWLEDGE_PARAMS`). A search answers only when its best hit reaches
the floor (the request's ``min_relevance``, else the model's); otherwise it returns no
hits and says how many were withheld (``below_floor``), as memory search does. With the
local embedder and the server's ``--knowledge-reading on`` (off by default) a hybrid search
first reads its best chunks (`reading`): the relevance then also weighs the query's best
cosine to one of their sentences (`KNOWLEDGE_READING_MODEL`).

A configured reranker (the memories' one, `retrieval.rerankers`) then reorders the top N
of an answered SearchKnowledge, reading each chunk's heading path and text; when it fails
the fused order is returned and ``ranking`` says so. It never decides silence: the floor
is the relevance model's, before it. Without a reranker, the first 5 chunks of an answered
search are reordered by late interaction over their stored token vectors (`late`).

BuildContext asks for chunks with `recall_chunks`, under the same floor (in fused order),
and shows each chosen chunk with its neighbours in the document when the budget allows
(`neighbours`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import asyncpg
import structlog

from brain.authz import Caller
from brain.server.domain import convert
from brain.server.domain import validation as check
from brain.server.domain.context import Neighbours
from brain.server.domain.knowledge import late, reading
from brain.server.domain.memories import DEFAULT_SEARCH_LIMIT, Memories
from brain.server.domain.retrieval import lanes as retrieval
from brain.server.domain.retrieval.embedders import EmbedderError
from brain.server.domain.retrieval.lanes import Corpus, FusedHit, RetrievalParams
from brain.server.domain.retrieval.relevance import (
    KNOWLEDGE_HYBRID_MODEL,
    KNOWLEDGE_LEXICAL_MODEL,
    KNOWLEDGE_READING_MODEL,
    RelevanceModel,
)
from brain.server.domain.retrieval.rerankers import RerankerError
from brain.server.storage import knowledge as sql
from brain.v1 import knowledge_pb2

__all__ = [
    "CHUNKS",
    "KNOWLEDGE_PARAMS",
    "MAX_COLLECTIONS",
    "ChunkObserver",
    "ChunkSearch",
    "ContextShape",
    "Found",
    "hit_message",
]

MAX_COLLECTIONS = 16
CHUNKS = Corpus(
    "document_chunks",
    (("chunk_id", "uuid"),),
    sql.chunk_columns,
    session="document_id",
    ties=("collection", "path", "chunk_no"),
)
# The memories' lanes and BM25 constants (b = 0 stayed best on chunks too: docs,
# Knowledge base), with relevance models fitted on chunks.
KNOWLEDGE_PARAMS = replace(
    RetrievalParams(),
    lexical_model=KNOWLEDGE_LEXICAL_MODEL,
    hybrid_model=KNOWLEDGE_HYBRID_MODEL,
)

_log = structlog.get_logger("brain.knowledge")

# Sees every fused candidate of a search before the floor and the limit, with the number of
# chunks searched: how brain-eval fits the knowledge relevance model on what the server
# computed.
ChunkObserver = Callable[[list[FusedHit], int], None]


@dataclass(frozen=True)
class Found:
    """A knowledge search's hits, best first, and which lanes ran (a ``KnowledgeLanes``).

    ``below_floor``: chunks withheld because none reached the relevance floor (at most the
    search's limit); no hits and ``below_floor > 0`` means "nothing relevant enough".
    ``ranking``: a ``KnowledgeRanking``.
    """

    hits: list[FusedHit]
    lanes: int
    below_floor: int = 0
    ranking: int = knowledge_pb2.KNOWLEDGE_RANKING_FUSED
    # The query's token vectors as late interaction reads them (`late.query_form`), kept
    # from its embedding; None when the search embedded no query or the model gives none.
    query_tokens: Any = None


def hit_message(hit: FusedHit) -> knowledge_pb2.KnowledgeHit:
    return knowledge_pb2.KnowledgeHit(
        source=convert.chunk_source(hit.row),
        content=hit.row["content"],
        score=hit.score,
        lexical_rank=hit.lexical_rank,
        semantic_rank=hit.semantic_rank,
        lexical_score=hit.lexical_score,
        semantic_similarity=hit.semantic_similarity,
        relevance=hit.relevance,
        rerank_score=hit.rerank_score,
    )


def reranked_text(row: Any) -> str:
    """What the reranker reads of a chunk: its heading path, then its text."""
    path = " > ".join(row["heading_path"] or ())
    return f"{path}\n\n{row['content']}" if path else str(row["content"])


@dataclass(frozen=True)
class ContextShape:
    """Which neighbours BuildContext may show with a chosen chunk (docs: Knowledge base,
    for how this was measured): up to ``span`` chunks on each side, only of the hit's own
    section when ``same_section``. They use only budget every chosen hit left over."""

    span: int = 1
    same_section: bool = True


class ChunkSearch:
    """SearchKnowledge and the chunks of BuildContext for an authenticated caller."""

    def __init__(self, memories: Memories, params: RetrievalParams = KNOWLEDGE_PARAMS) -> None:
        self.memories = memories
        self.params = params
        self.shape = ContextShape()
        self.observer: ChunkObserver | None = None  # brain-eval only
        # Embedder name -> the relevance model of a hybrid search that reads its best chunks
        # (`reading`); a search with another embedder (the calling tenant's, see
        # `retrieval.routing`) reads nothing: an endpoint's cost per search, and no model
        # fitted for its cosines. The server empties it unless told --knowledge-reading on.
        self.reading_models: dict[str, RelevanceModel] = {"local": KNOWLEDGE_READING_MODEL}
        # Chunks of an answered search reordered by late interaction (`late`) when no
        # reranker is configured and the query's and chunks' token vectors are there (the
        # local embedder); 0: off (the server's --knowledge-late-rerank off).
        self.late_top = late.LATE_TOP
        memories.query_vectors.token_form = late.query_form

    async def search(
        self,
        caller: Caller,
        req: knowledge_pb2.SearchKnowledgeRequest,
        timeout_ms: int | None = None,
    ) -> Found:
        limit = self.memories.page_size("limit", req.limit, DEFAULT_SEARCH_LIMIT)
        collections = check.names("collections", req.collections, limit=MAX_COLLECTIONS)
        floor = (
            check.unit_interval("min_relevance", req.min_relevance)
            if req.HasField("min_relevance")
            else None
        )
        reranker = self.memories.reranker
        found = await self.recall(
            caller, req.query, limit, collections, timeout_ms,
            lexical_only=req.lexical_only, min_relevance=floor,
            depth=max(limit, reranker.top_n) if reranker is not None else limit,
        )  # fmt: skip
        return await self.rerank(caller, req.query, found, limit, timeout_ms)

    async def rerank(
        self, caller: Caller, query: str, found: Found, limit: int, timeout_ms: int | None = None
    ) -> Found:
        """The reranker's order for the top N of the hits, the rest after them in fused
        order; like a failing embedder, a failing reranker never fails a search."""
        reranker = self.memories.reranker
        if reranker is None and found.hits and self.late_top:
            return await self.late_rerank(caller, found, limit, timeout_ms)
        if reranker is None or not found.hits:
            return replace(found, hits=found.hits[:limit])
        head = found.hits[: reranker.top_n]
        try:
            scores = await reranker.rerank(query, [reranked_text(h.row) for h in head])
        except RerankerError as exc:
            _log.warning("reranking failed; fused order returned", error=str(exc))
            return replace(
                found,
                hits=found.hits[:limit],
                ranking=knowledge_pb2.KNOWLEDGE_RANKING_FUSED_RERANKER_UNAVAILABLE,
            )
        for hit, score in zip(head, scores, strict=True):
            hit.rerank_score = score
        head = sorted(head, key=lambda h: -h.rerank_score)  # stable: ties keep fused order
        hits = (head + found.hits[len(head) :])[:limit]
        return replace(found, hits=hits, ranking=knowledge_pb2.KNOWLEDGE_RANKING_RERANKED)

    async def late_rerank(
        self, caller: Caller, found: Found, limit: int, timeout_ms: int | None = None
    ) -> Found:
        """The first `late_top` hits reordered by MaxSim of the query's token vectors to
        each chunk's stored ones (`late`), each carrying it as ``rerank_score``; the fused
        order unless the query and every one of those chunks have token vectors (a chunk
        embedded before they were stored, or not yet embedded, keeps the search fused)."""
        head = found.hits[: self.late_top]
        if found.query_tokens is None or not len(found.query_tokens):
            return replace(found, hits=found.hits[:limit])
        m = self.memories
        where = sql.chunk_where(m.visibility(caller), ())
        async with m.tx(caller, timeout_ms=timeout_ms, readonly=True, replica=True) as conn:
            stored = await sql.token_vectors(conn, where, [h.row for h in head])
        if len(stored) < len(head):
            return replace(found, hits=found.hits[:limit])
        scores = late.late_scores(found.query_tokens, [stored[h.row["chunk_id"]] for h in head])
        for hit, score in zip(head, scores, strict=True):
            hit.rerank_score = score
        head = sorted(head, key=lambda h: -h.rerank_score)  # stable: ties keep fused order
        hits = (head + found.hits[len(head) :])[:limit]
        return replace(found, hits=hits, ranking=knowledge_pb2.KNOWLEDGE_RANKING_RERANKED)

    async def recall(
        self,
        caller: Caller,
        query_text: str,
        limit: int,
        collections: Sequence[str],
        timeout_ms: int | None,
        *,
        lexical_only: bool = False,
        vector: Sequence[float] | None = None,
        min_relevance: float | None = None,
        depth: int | None = None,
    ) -> Found:
        """Ranked chunks of current documents, ``depth`` of them (default ``limit``); none
        when no chunk's relevance reaches ``min_relevance`` (default: the relevance
        model's floor), and then ``below_floor`` counts up to ``limit``."""
        query = check.query("query", query_text)
        m, params = self.memories, self.params
        lanes = knowledge_pb2.KNOWLEDGE_LANES_LEXICAL
        query_tokens = None
        if vector is not None:  # the caller embedded the query already (BuildContext)
            lanes = knowledge_pb2.KNOWLEDGE_LANES_HYBRID
        elif not lexical_only and m.embedder.dimension and m.reads(query):
            # (a query the embedder cannot read is answered lexically, see Memories.reads)
            try:
                vector, query_tokens = await m.query_embedding(caller, query)
                lanes = knowledge_pb2.KNOWLEDGE_LANES_HYBRID
            except EmbedderError as exc:
                _log.warning("query embedding failed; lexical only", error=str(exc))
                lanes = knowledge_pb2.KNOWLEDGE_LANES_LEXICAL_EMBEDDER_UNAVAILABLE
        n = max(limit, params.candidates)
        asked = vector  # the query's own vector, before feedback moves it
        vis = m.visibility(caller)
        where = sql.chunk_where(vis, collections)
        async with m.tx(caller, timeout_ms=timeout_ms, readonly=True, replica=True) as conn:
            size = await retrieval.rows_in(conn, CHUNKS, where)
            lexical = await retrieval.bm25_lane(
                conn, CHUNKS, vis, where, query, n, params, corpus_size=size
            )
            exact = await retrieval.bm25_lane(
                conn, CHUNKS, vis, where, query, n, params, "simple", size
            )
            semantic: list[retrieval.LaneHit] = []
            if vector is not None:
                model = m.embedding_model
                vector = await retrieval.feedback_vector(
                    conn, vis, vector, lexical, params, model, CHUNKS, where
                )
                semantic = await retrieval.nearest_lane(
                    conn, CHUNKS, vis, where, vector, n, params, model
                )
        relevance = params.hybrid_model if semantic else params.lexical_model
        fused = retrieval.fuse(
            lexical, semantic, None, params, exact=exact, corpus=CHUNKS,
            corpus_size=size, model=relevance, vectors=m.embedding_model,
        )  # fmt: skip
        reads = self.reading_models.get(m.embedder.name) if semantic else None
        if reads is not None and asked is not None:
            relevance = await reading.reweigh(
                m.embedder, query, asked, fused, size, relevance, reads
            )
        if self.observer is not None:
            self.observer(fused, size)
        # As memory search: the search answers only when its best hit reaches the floor;
        # weaker hits of an answered query still come, ranked lower.
        # (A chunk whose vector has not landed yet has the lexical model's relevance, so
        # its floor: `fuse`.)
        if min_relevance is not None:
            floor = vectorless = min_relevance
        elif size < params.floor_min_rows:
            floor = vectorless = 0.0
        else:
            floor, vectorless = relevance.floor, params.lexical_model.floor
        if fused and not retrieval.reaches(fused, floor, vectorless):
            return Found([], lanes, below_floor=min(limit, len(fused)))
        return Found(fused[: max(limit, depth or 0)], lanes, query_tokens=query_tokens)

    async def recall_chunks(
        self,
        caller: Caller,
        query_text: str,
        limit: int,
        collections: Sequence[str],
        timeout_ms: int | None,
        vector: Sequence[float] | None,
        lexical_only: bool,
        min_relevance: float | None = None,
    ) -> list[FusedHit]:
        """The chunks BuildContext mixes with memories (``KnowledgeRecall``), searched with
        the query vector it already has, under its floor (default: the model's)."""
        found = await self.recall(
            caller, query_text, limit, collections, timeout_ms,
            lexical_only=lexical_only, vector=vector, min_relevance=min_relevance,
        )  # fmt: skip
        return found.hits

    async def neighbours(
        self, caller: Caller, hits: Sequence[FusedHit], timeout_ms: int | None
    ) -> Neighbours:
        """Each hit's neighbouring chunks as BuildContext shows them (``shape``), in
        document order, by chunk id; read under the caller's visibility like the hits."""
        shape = self.shape
        if not hits or shape.span < 1:
            return {}
        m = self.memories
        vis = m.visibility(caller)
        where = sql.chunk_where(vis, ())
        rows = [h.row for h in hits]
        async with m.tx(caller, timeout_ms=timeout_ms, readonly=True, replica=True) as conn:
            near = await sql.neighbours(conn, vis, where, rows, shape.span)
        around: dict[Any, list[asyncpg.Record]] = {}
        for hit in rows:
            mine = [
                r for r in near
                if (r["tenant_id"], r["document_id"], r["version"])
                == (hit["tenant_id"], hit["document_id"], hit["version"])
                and abs(r["chunk_no"] - hit["chunk_no"]) <= shape.span
                and (not shape.same_section or r["heading_path"] == hit["heading_path"])
            ]  # fmt: skip
            if mine:
                around[hit["chunk_id"]] = sorted(mine, key=lambda r: r["chunk_no"])
        return around
