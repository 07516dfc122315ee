"""Late interaction (docs: Knowledge base): the first chunks of an answered knowledge search
reordered by MaxSim over the local model's token vectors, when the server is told
--knowledge-late-rerank on. The reordering tests use a fake embedder whose token vectors
are written in the test; one test reads the real model's token vectors (shape only)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from brain.server.domain.knowledge import late
from brain.server.domain.knowledge.search import ChunkSearch, Found
from brain.server.domain.retrieval.embedders import EmbedderError, LocalEmbedder
from brain.server.domain.retrieval.lanes import FusedHit
from brain.v1 import knowledge_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api, check_off_unless_told_on
from .test_knowledge import ALL, get_call, put, search

# One axis per word: a text's token vectors are its words' axes.
AXES = ("deploy", "rollback", "timeout", "billing", "payload", "limit")


def vectors(text: str) -> tuple[np.ndarray, list[str]]:
    words = [w for w in text.lower().replace("\n", " ").split() if w]
    rows = np.zeros((len(words), len(AXES) + 1), dtype=np.float32)
    for i, w in enumerate(words):
        rows[i, AXES.index(w) if w in AXES else len(AXES)] = 1.0
    return rows, words


class TokenEmbedder:
    name = "local"
    dimension = 7

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.asked: list[list[str]] = []

    async def token_vectors(self, texts: Sequence[str]) -> list[tuple[np.ndarray, list[str]]]:
        self.asked.append(list(texts))
        if self.fail:
            raise EmbedderError("down")
        return [vectors(t) for t in texts]


def hit(content: str, score: float, heading: Sequence[str] = ()) -> FusedHit:
    return FusedHit(row={"content": content, "heading_path": list(heading)}, score=score)  # type: ignore[arg-type]


def searching(embedder: Any, reads: bool = True) -> ChunkSearch:
    memories = SimpleNamespace(reranker=None, embedder=embedder, reads=lambda q: reads)
    search = ChunkSearch(memories)  # type: ignore[arg-type]
    search.late_top = late.LATE_TOP
    return search


def test_query_rows_leave_out_stop_words_and_punctuation_unless_nothing_is_left() -> None:
    assert late.query_rows(["what", "is", "the", "rollback", "time", "##out", "?"]) == [3, 4, 5]
    assert late.query_rows(["what", "is", "it", "?"]) == [0, 1, 2, 3]


def test_maxsim_averages_each_query_rows_best_cosine() -> None:
    q = np.eye(3, dtype=np.float32)[:2]
    p = np.array([[1, 0, 0], [0, 0.6, 0.8]], dtype=np.float32)
    assert late.maxsim(q, p) == pytest.approx((1.0 + 0.6) / 2)
    assert late.maxsim(q, p[:0]) == 0.0


def test_the_first_five_are_reordered_by_maxsim_and_the_rest_keep_the_fused_order() -> None:
    hits = [
        hit("billing deploy", 0.9),
        hit("deploy", 0.8),
        hit("rollback timeout", 0.7, ["Deploy"]),  # its heading counts, as in its vector
        hit("payload", 0.6),
        hit("limit", 0.5),
        hit("rollback timeout deploy", 0.4),  # sixth: never moved up
    ]
    embedder = TokenEmbedder()
    found = asyncio.run(searching(embedder).rerank("deploy rollback timeout", Found(hits, 1), 10))
    assert [h.row["content"] for h in found.hits] == [
        "rollback timeout", "billing deploy", "deploy", "payload", "limit",
        "rollback timeout deploy",
    ]  # fmt: skip
    assert found.ranking == knowledge_pb2.KNOWLEDGE_RANKING_RERANKED
    assert found.hits[0].rerank_score == pytest.approx(1.0)
    assert found.hits[-1].rerank_score == 0.0
    assert embedder.asked == [["deploy rollback timeout", "billing deploy", "deploy",
                               "Deploy\nrollback timeout", "payload", "limit"]]  # fmt: skip


def test_the_fused_order_stays_when_off_unreadable_failing_or_without_token_vectors() -> None:
    hits = [hit("billing", 0.9), hit("rollback", 0.8)]

    def order(search: ChunkSearch) -> tuple[list[str], int]:
        found = asyncio.run(search.rerank("rollback", Found(list(hits), 1), 10))
        return [h.row["content"] for h in found.hits], found.ranking

    fused = (["billing", "rollback"], knowledge_pb2.KNOWLEDGE_RANKING_FUSED)
    assert order(searching(TokenEmbedder()))[0] == ["rollback", "billing"]
    off = searching(TokenEmbedder())
    off.late_top = 0
    assert order(off) == fused
    assert order(searching(TokenEmbedder(), reads=False)) == fused
    assert order(searching(TokenEmbedder(fail=True))) == fused
    assert order(searching(SimpleNamespace(name="openai", dimension=3))) == fused


def test_the_local_model_gives_unit_token_vectors_without_its_special_tokens() -> None:
    (rows, tokens), (more, _) = asyncio.run(
        LocalEmbedder().token_vectors(["Roll back the deploy.", "a much longer text " * 5])
    )
    assert tokens == ["roll", "back", "the", "deploy", "."]
    assert rows.shape == (5, 384) and more.shape == (20, 384)
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)


def test_late_rerank_is_off_unless_the_server_is_told_on(monkeypatch: pytest.MonkeyPatch) -> None:
    check_off_unless_told_on(monkeypatch, "knowledge_late_rerank")


async def test_a_search_through_the_server_is_reordered_by_late_interaction(
    pg_cluster: PgCluster, loop_thread: LoopThread
) -> None:
    """With --knowledge-late-rerank on and the local model, an answered search comes back
    RERANKED, its first hits ordered by their MaxSim (each a real cosine mean, in (0, 1]);
    the hits are the fused search's, only their order within the first five moves.
    (Structural only: nothing here depends on what the model thinks of these texts.)"""
    server = BrainServer(
        cluster=pg_cluster, loop=loop_thread,
        settings=server_settings(pg_cluster, embedder="local", knowledge_late_rerank=True),
    )  # fmt: skip
    server.start()
    try:
        async with server.channel() as channel:
            api = Api(channel, server.mint_key(unique("kb"), "w", permissions=ALL))
            texts = {
                "deploy.md": "# Deploys\n\nA deploy rolls back when its health check fails.",
                "billing.md": "# Billing\n\nInvoices are sent on the first of the month.",
                "timeouts.md": "# Timeouts\n\nThe deploy health check times out after 30 s.",
            }
            ids = [(await put(api, path, text)).document.id for path, text in texts.items()]
            for _ in range(400):  # the server's filler embeds them
                docs = [(await get_call(api, i)).document for i in ids]
                if all(d.fully_embedded for d in docs):
                    break
                await asyncio.sleep(0.05)
            found = await search(api, "when does a deploy roll back", min_relevance=0.0)
            assert found.ranking == knowledge_pb2.KNOWLEDGE_RANKING_RERANKED
            scores = [h.rerank_score for h in found.hits[: late.LATE_TOP]]
            assert scores and all(0.0 < s <= 1.0 for s in scores)
            assert scores == sorted(scores, reverse=True)
            assert {h.source.path for h in found.hits} <= set(texts)
    finally:
        server.stop()
