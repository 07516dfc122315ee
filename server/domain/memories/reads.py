"""The memory read path: GetMemory, history, ListMemories, ExportMemories, SearchMemories and
BuildContext. Every statement carries the caller's visibility predicate."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

import asyncpg
import structlog

from brain.authz import Caller, Permission
from brain.server.domain import context, convert, cursors
from brain.server.domain import validation as check
from brain.server.domain.conflicts.service import conflict_marks
from brain.server.domain.graph.assertions import without_names
from brain.server.domain.memories._common import (
    ALL_STATUSES,
    DEFAULT_PAGE_SIZE,
    DEFAULT_SEARCH_LIMIT,
    EXPORT_BATCH,
    MAX_KNOWLEDGE_COLLECTIONS,
    MemoryBase,
    Recalled,
    row_filter,
    time_coords,
)
from brain.server.domain.retrieval import hops
from brain.server.domain.retrieval import lanes as retrieval
from brain.server.domain.retrieval.embedders import EmbedderError
from brain.server.domain.retrieval.lanes import FusedHit
from brain.server.domain.retrieval.relevance import RelevanceModel
from brain.server.domain.retrieval.rerankers import RerankerError
from brain.server.domain.retrieval.updates import current_first, links
from brain.server.errors import (
    FailedPrecondition,
    InvalidArgument,
    Unavailable,
    memory_not_found,
)
from brain.server.storage import memories as sql
from brain.server.storage.visibility import Visibility
from brain.v1 import common_pb2, memory_pb2

_log = structlog.get_logger("brain.memories")
# How many of the fused hits current-first reorders, whatever the search's limit.
CURRENT_FIRST_DEPTH = DEFAULT_SEARCH_LIMIT


class Lanes(NamedTuple):
    """What the lanes of one search found, how many rows they searched (BM25's N, 0 when
    no lexical lane ran) and whether the semantic lane ran."""

    lexical: list[retrieval.LaneHit]
    exact: list[retrieval.LaneHit]
    semantic: list[retrieval.LaneHit]
    rows: int
    hybrid: bool
    graph: list[retrieval.LaneHit] = []  # the entity graph lane (off by default)
    vector: list[float] | None = None  # the query vector the semantic lane used

    @property
    def query_similarity(self) -> float:
        """The best cosine of a semantic hit to the query's own vector (0: none)."""
        return max((h.query_similarity for h in self.semantic), default=0.0)


def similar_enough(model: RelevanceModel, found: Lanes) -> bool:
    """Whether a semantic hit is as close to the query's own vector (not the one moved
    toward the lexical hits) as ``model``'s answer similarity: for an embedder whose cosine
    alone tells an answer (see `RelevanceModel.answer_similarity`), a reworded question
    sharing no word with its answer is not silenced."""
    return model.answer_similarity is not None and (
        found.query_similarity >= model.answer_similarity
    )


def requested_floor(
    req: memory_pb2.SearchMemoriesRequest | memory_pb2.BuildContextRequest,
) -> float | None:
    """The request's ``min_relevance`` (0..1), or None for the server's default floor."""
    if not req.HasField("min_relevance"):
        return None
    return check.unit_interval("min_relevance", req.min_relevance)


class MemoryReads(MemoryBase):
    """Carries out the memory RPCs that read."""

    async def get(
        self, caller: Caller, req: memory_pb2.GetMemoryRequest, timeout_ms: int | None = None
    ) -> memory_pb2.GetMemoryResponse:
        memory_id = check.memory_id("id", req.id)
        t = time_coords(req.time, default_any_valid=True)
        async with self.tx(caller, timeout_ms=timeout_ms, readonly=True, replica=True) as conn:
            row = await sql.get_memory(conn, self.visibility(caller), memory_id, t)
        if row is None:
            raise memory_not_found()
        return memory_pb2.GetMemoryResponse(memory=convert.memory(row))

    async def history(
        self,
        caller: Caller,
        req: memory_pb2.GetMemoryHistoryRequest,
        timeout_ms: int | None = None,
    ) -> memory_pb2.GetMemoryHistoryResponse:
        memory_id = check.memory_id("id", req.id)
        async with self.tx(caller, timeout_ms=timeout_ms, readonly=True, replica=True) as conn:
            rows = await sql.history(conn, self.visibility(caller), memory_id)
        if not rows:
            raise memory_not_found()
        return memory_pb2.GetMemoryHistoryResponse(versions=[convert.memory(r) for r in rows])

    async def list_page(
        self, caller: Caller, req: memory_pb2.ListMemoriesRequest, timeout_ms: int | None = None
    ) -> memory_pb2.ListMemoriesResponse:
        size = self.page_size("page_size", req.page_size, DEFAULT_PAGE_SIZE)
        f = row_filter(req.filter)
        t = time_coords(req.time, default_any_valid=False)
        after = None
        if req.page_token:
            data = self.tokens.decode(
                caller, "page_token", req.page_token, kind=cursors.Kind.MEMORIES
            )
            after = cursors.get_uuid("page_token", data, "k")
            # A token pins the snapshot its first page saw, so pages never shift.
            t = replace(t, as_of=cursors.get_time("page_token", data, "a"))
        if t.as_of is None:
            t = replace(t, as_of=datetime.now(UTC))
        async with self.tx(caller, timeout_ms=timeout_ms, readonly=True, replica=True) as conn:
            rows = await sql.list_page(conn, self.visibility(caller), f, t, after, size + 1)
        more = len(rows) > size
        rows = rows[:size]
        token = ""
        if more and t.as_of is not None:
            token = self.tokens.encode(
                caller,
                {"k": str(rows[-1]["memory_id"]), "a": t.as_of.isoformat()},
                kind=cursors.Kind.MEMORIES,
            )
        return memory_pb2.ListMemoriesResponse(
            memories=[convert.memory(r) for r in rows], next_page_token=token
        )

    async def export(
        self, caller: Caller, req: memory_pb2.ExportMemoriesRequest
    ) -> AsyncIterator[memory_pb2.ExportMemoriesResponse]:
        f = replace(row_filter(req.filter, ALL_STATUSES), hide_expired=False)
        after: tuple[uuid.UUID, int] | None = None
        if req.cursor:
            token = self.tokens.decode(caller, "cursor", req.cursor, kind=cursors.Kind.EXPORT)
            after = (cursors.get_uuid("cursor", token, "k"), cursors.get_int("cursor", token, "v"))
        vis = self.visibility(caller)
        while True:
            async with self.tx(caller, readonly=True, replica=True) as conn:
                rows = await sql.export_page(conn, vis, f, req.include_history, after, EXPORT_BATCH)
            for row in rows:
                after = (row["memory_id"], row["version"])
                yield memory_pb2.ExportMemoriesResponse(
                    memory=convert.memory(row),
                    cursor=self.tokens.encode(
                        caller, {"k": str(after[0]), "v": after[1]}, kind=cursors.Kind.EXPORT
                    ),
                )
            if len(rows) < EXPORT_BATCH:
                return

    async def search(
        self, caller: Caller, req: memory_pb2.SearchMemoriesRequest, timeout_ms: int | None = None
    ) -> Recalled:
        limit = self.page_size("limit", req.limit, DEFAULT_SEARCH_LIMIT)
        floor = requested_floor(req)
        return await self.recall(
            caller, req.query, limit, req.filter, req.time, timeout_ms,
            mode=req.mode or memory_pb2.SEARCH_MODE_HYBRID, query_embedding=req.query_embedding,
            min_relevance=floor,
        )  # fmt: skip

    async def build_context(
        self, caller: Caller, req: memory_pb2.BuildContextRequest, timeout_ms: int | None = None
    ) -> memory_pb2.BuildContextResponse:
        token_budget, count = context.budget(req)
        collections = check.names(
            "knowledge_collections", req.knowledge_collections, limit=MAX_KNOWLEDGE_COLLECTIONS
        )
        query = check.query("query", req.query)
        floor = requested_floor(req)
        # One query vector serves memories and documents: a slow or failing embedder is
        # waited for once, and both fall back to their lexical lanes together.
        vector: list[float] | None = None
        # A query the embedder cannot read (see `reads`) is answered lexically.
        lexical_only = not self.reads(query)
        if self.embedder.dimension and not lexical_only:
            try:
                vector = await self.query_vector(caller, query, ())
            except EmbedderError as exc:
                _log.warning("query embedding failed; lexical only", error=str(exc))
                lexical_only = True
        # The memories are searched as SearchMemories searches them (its semantic lane
        # maybe without people's names, see `recall`); the query's own vector is cached.
        found = await self.recall(
            caller, query, count, req.filter, req.time, timeout_ms,
            mode=memory_pb2.SEARCH_MODE_LEXICAL if lexical_only else memory_pb2.SEARCH_MODE_HYBRID,
            min_relevance=floor,
        )  # fmt: skip
        chunks: list[FusedHit] = []
        if (
            self.knowledge is not None
            and not req.exclude_knowledge
            and caller.has(Permission.KNOWLEDGE_READ.value)
        ):
            chunks = await self.knowledge.recall_chunks(
                caller,
                query,
                count,
                collections,
                timeout_ms,
                vector,
                lexical_only,
                min_relevance=floor,
            )
            around = await self.knowledge.neighbours(caller, chunks, timeout_ms)
            return context.pack(found.hits, token_budget, chunks, found.conflicts, around)
        return context.pack(found.hits, token_budget, conflicts=found.conflicts)

    async def recall(
        self,
        caller: Caller,
        query_text: str,
        limit: int,
        filter_: common_pb2.MemoryFilter,
        time: common_pb2.TimeTravel,
        timeout_ms: int | None,
        *,
        mode: int = memory_pb2.SEARCH_MODE_HYBRID,
        query_embedding: Sequence[float] = (),
        min_relevance: float | None = None,
    ) -> Recalled:
        """Ranked hits for a query: every lane filtered by scope, status and time first.

        When no hit's relevance reaches ``min_relevance`` (default: the relevance model's
        floor) nothing is returned. A configured reranker then reorders the fused top N
        (outside the transaction).
        """
        query = check.query("query", query_text)
        f = row_filter(filter_)
        t = time_coords(time, default_any_valid=False)
        about_now = (
            self.params.current_first
            and t.as_of is None
            and t.valid_at is None
            and not t.any_valid_time
        )
        if mode not in memory_pb2.SearchMode.values():
            raise InvalidArgument("mode", f"unknown search mode {mode}")
        vector = None
        pending: asyncio.Task[list[float] | None] | None = None
        # A hybrid search embeds its query in its transaction, once it knows the people it
        # names; the other modes, and a vector the caller gave, before it.
        later = mode == memory_pb2.SEARCH_MODE_HYBRID and not query_embedding
        embeds = later and bool(self.embedder.dimension) and self.reads(query)
        if not later and mode != memory_pb2.SEARCH_MODE_LEXICAL:
            try:
                vector = await self.query_vector(caller, query, query_embedding)
            except EmbedderError as exc:
                if mode == memory_pb2.SEARCH_MODE_SEMANTIC:
                    raise Unavailable(
                        "the embedder is unavailable, so semantic search cannot run now; "
                        "hybrid and lexical search still work"
                    ) from exc
                _log.warning("query embedding failed; lexical only", error=str(exc))
            if vector is None and mode == memory_pb2.SEARCH_MODE_SEMANTIC:
                raise FailedPrecondition(
                    "mode: semantic search needs an embedder; this server runs with "
                    "--embedder none (pass query_embedding, or use hybrid or lexical)"
                )
        n = max(limit, self.params.candidates)
        vis = self.visibility(caller)
        try:
            async with self.tx(caller, timeout_ms=timeout_ms, readonly=True, replica=True) as conn:
                if embeds:
                    # Embedded while the lexical lanes run, awaited before the semantic
                    # lane; without the names of the people the caller's memories
                    # assert (names apart: a small sentence embedder lets "Melanie"
                    # outweigh "what activities", and the lexical lanes and `named`
                    # match the name; docs: Retrieval).
                    people = await hops.people_named(conn, vis, query, t, self.params)
                    read = without_names(query, people)
                    if not self.reads(read):  # what is left is a script it cannot read
                        read = query
                    pending = asyncio.create_task(self.query_vector(caller, read, ()))
                found = await self.lanes(conn, vis, query, f, t, n, mode, vector, pending)
                relevance = (
                    retrieval.hybrid_model(self.params, self.embedding_model)
                    if found.hybrid
                    else self.params.lexical_model
                )
                ids = {h.row["memory_id"] for hits in (*found[:3], found.graph) for h in hits}
                named = await hops.naming(conn, vis, query, t, ids, self.params)
                vectors = self.embedding_model
                fused = retrieval.fuse(
                    found.lexical, found.semantic, None, self.params, exact=found.exact,
                    graph=found.graph, named=named, corpus_size=found.rows, model=relevance,
                    vectors=vectors,
                )  # fmt: skip
                # The search answers only when its best hit reaches the floor: weaker hits of
                # an answered query still come (ranked lower), but a query that matched
                # nothing well returns nothing (see the relevance module and README,
                # Retrieval).
                floor = (
                    min_relevance
                    if min_relevance is not None
                    else self.default_floor(relevance, found.rows)
                )
                vectorless = (  # a memory whose vector has not landed yet: `fuse`
                    min_relevance
                    if min_relevance is not None
                    else self.default_floor(self.params.lexical_model, found.rows)
                )
                # A memory asserting an entity the query names matched a content word
                # (the graph lane), and under the default floor a memory as close to the
                # query as the embedder's answer similarity: neither is silenced.
                if (
                    fused
                    and not retrieval.reaches(fused, floor, vectorless)
                    and not any(h.graph_rank for h in fused)
                    and not (min_relevance is None and similar_enough(relevance, found))
                ):
                    if self.observer is not None:
                        self.observer(fused, found.rows)
                    return Recalled(
                        [], memory_pb2.RANKING_FUSED, below_floor=min(limit, len(fused))
                    )
                # Two hops: a second round from the best hits (an answered search only,
                # through the same walls; see retrieval.hops).
                if mode != memory_pb2.SEARCH_MODE_SEMANTIC and fused:
                    again = await hops.second_round(
                        conn, vis, query, f, t, n, self.params, fused, found.vector,
                        self.embedding_model,
                    )  # fmt: skip
                    if again:
                        new = {h.row["memory_id"] for h in (*again.names, *again.vector)} - ids
                        named |= await hops.naming(conn, vis, query, t, new, self.params)
                        fused = retrieval.fuse(
                            found.lexical, found.semantic, None, self.params,
                            exact=found.exact, graph=found.graph, hop=again.names,
                            again=again.vector, named=named, corpus_size=found.rows,
                            model=relevance, vectors=vectors,
                        )  # fmt: skip
                if self.observer is not None:
                    self.observer(fused, found.rows)
                depth = max(limit, self.reranker.top_n) if self.reranker is not None else limit
                if about_now:  # the top hits may not depend on the limit (below)
                    depth = max(depth, CURRENT_FIRST_DEPTH)
                # The lanes read what ranking needs; the hits shown are read in full here.
                head = await retrieval.shown(conn, vis, fused[:depth])
                marks = await conflict_marks(conn, vis, head)
        finally:
            if pending is not None:
                pending.cancel()  # a no-op once awaited
        recalled = replace(await self.rerank(query, head, len(head)), conflicts=marks)
        if about_now:
            # A question about now: a newer statement of a changed value ranks first, by
            # a recorded conflict between two hits (read through the caller's walls) or
            # by the text rule. Over the same first CURRENT_FIRST_DEPTH hits whatever the
            # limit (the rest keep the fused order), so that a larger limit only adds hits:
            # an update found at rank 8 moved to the top for limit=10 and not for limit=5.
            linked = links(recalled.conflicts)
            top = current_first(recalled.hits[:CURRENT_FIRST_DEPTH], linked)
            recalled = replace(recalled, hits=top + recalled.hits[CURRENT_FIRST_DEPTH:])
        shown = recalled.hits[:limit]
        kept = {h.row["memory_id"] for h in shown}
        return replace(
            recalled, hits=shown, conflicts={k: v for k, v in marks.items() if k in kept}
        )

    def reads(self, query: str) -> bool:
        """Whether the (calling tenant's) embedder can read ``query`` (see
        `LocalEmbedder.reads`); a hybrid search of a query it cannot read is lexical."""
        reads = getattr(self.embedder, "reads", None)
        return reads is None or bool(reads(query))

    def default_floor(self, model: RelevanceModel, searched_rows: int) -> float:
        """The model's floor, once the lexical lanes ran over enough rows for BM25's term
        weights to mean something (a semantic-only search keeps its similarity floor)."""
        return model.floor if searched_rows >= self.params.floor_min_rows else 0.0

    async def lanes(
        self,
        conn: asyncpg.Connection,
        vis: Visibility,
        query: str,
        f: sql.RowFilter,
        t: sql.TimeCoords,
        n: int,
        mode: int,
        vector: list[float] | None,
        pending: asyncio.Task[list[float] | None] | None,
    ) -> Lanes:
        """The lexical lanes, then the semantic one once the query's vector is there."""
        model = self.embedding_model
        lexical: list[retrieval.LaneHit] = []
        exact: list[retrieval.LaneHit] = []
        size = 0
        if mode != memory_pb2.SEARCH_MODE_SEMANTIC and retrieval.uses_term_statistics(f, t):
            both = await retrieval.lexical_lanes(conn, vis, query, f, t, n, self.params)
            lexical, exact, size = both.english, both.simple, both.searched_rows
        elif mode != memory_pb2.SEARCH_MODE_SEMANTIC:
            size = await retrieval.corpus_size(conn, vis, f, t)
            lexical = await retrieval.lexical_lane(
                conn, vis, query, f, t, n, self.params, corpus_size=size
            )
            exact = await retrieval.lexical_lane(
                conn, vis, query, f, t, n, self.params, config="simple", corpus_size=size
            )
        graph: list[retrieval.LaneHit] = []
        if mode != memory_pb2.SEARCH_MODE_SEMANTIC:
            graph = await retrieval.graph_lane(conn, vis, query, f, t, n, self.params)
        semantic: list[retrieval.LaneHit] = []
        if pending is not None:
            try:
                vector = await pending
            except EmbedderError as exc:
                _log.warning("query embedding failed; lexical only", error=str(exc))
        if vector is not None:
            own = vector
            if mode == memory_pb2.SEARCH_MODE_HYBRID:
                vector = await retrieval.feedback_vector(
                    conn, vis, vector, lexical, self.params, model
                )
            semantic = await retrieval.semantic_lane(
                conn, vis, vector, f, t, n, self.params, model=model,
                query=own if vector is not own else None,
            )  # fmt: skip
        return Lanes(
            lexical, exact, semantic, size, hybrid=vector is not None, graph=graph, vector=vector
        )

    async def rerank(self, query: str, hits: list[FusedHit], limit: int) -> Recalled:
        """The reranker's order for the top N, the rest after them in fused order.

        Like a failing embedder, a failing reranker never fails a search: the fused order
        is returned, and the ranking says so.
        """
        if self.reranker is None or not hits:
            return Recalled(hits[:limit], memory_pb2.RANKING_FUSED)
        head = hits[: self.reranker.top_n]
        try:
            scores = await self.reranker.rerank(query, [h.row["content"] for h in head])
        except RerankerError as exc:
            _log.warning("reranking failed; fused order returned", error=str(exc))
            return Recalled(hits[:limit], memory_pb2.RANKING_FUSED_RERANKER_UNAVAILABLE)
        for hit, score in zip(head, scores, strict=True):
            hit.rerank_score = score
        head = sorted(head, key=lambda h: -h.rerank_score)  # stable: ties keep fused order
        return Recalled((head + hits[len(head) :])[:limit], memory_pb2.RANKING_RERANKED)

    async def query_vector(
        self, caller: Caller, query: str, given: Sequence[float]
    ) -> list[float] | None:
        if given:
            if len(given) != self.embedding_dimension:
                raise InvalidArgument(
                    "query_embedding",
                    f"has {len(given)} values; this server's embeddings have "
                    f"{self.embedding_dimension} dimensions",
                )
            if not all(math.isfinite(x) for x in given):
                raise InvalidArgument("query_embedding", "must hold finite numbers")
            return list(given)
        return (await self.query_embedding(caller, query))[0]

    async def query_embedding(self, caller: Caller, query: str) -> tuple[list[float] | None, Any]:
        """The query's vector (None without an embedder) and the form of its token vectors
        kept from the same model run (`QueryVectors.token_form`; None without one)."""
        if self.embedder.dimension == 0:
            return None, None
        model = self.embedding_model or self.embedder.name
        return await self.query_vectors.embedded(
            self.embedder, model, query, tenant=caller.tenant_id
        )
