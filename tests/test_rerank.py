"""The optional reranker: a real brain-server calling a real local /v1/rerank HTTP server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brain.server.domain.retrieval.rerankers import RerankerError, build_reranker
from brain.v1 import memory_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api, JsonEndpoint, serving

# BM25 ranks these by how often "alpha" occurs: A, B, C (the fused order).
DOCS = {"A": "alpha alpha alpha report", "B": "alpha alpha memo", "C": "alpha note"}


class FakeRerankServer(JsonEndpoint):
    """A Cohere-style rerank server on 127.0.0.1: documents containing `prefer` score 1."""

    def __init__(self) -> None:
        super().__init__()
        self.reset()

    def reset(self) -> None:
        self.prefer = "memo"
        self.mode = "cohere"  # cohere | tei | http_error | partial | hang_up | slow
        self.requests.clear()

    def answer(self, body: Any) -> tuple[int, Any] | None:
        mode = self.mode
        if mode == "hang_up":
            return None
        if mode == "slow":
            self.released.wait(60)
        if mode == "http_error":
            return 503, {"error": "loading"}
        scores = [float(self.prefer in doc) for doc in body["documents"]]
        if mode == "tei":
            return 200, [{"index": i, "score": s} for i, s in enumerate(scores)]
        results = [{"index": i, "relevance_score": s} for i, s in enumerate(scores)][::-1]
        if mode == "partial":
            results = results[:1]
        return 200, {"results": results, "model": body["model"]}


@pytest.fixture(scope="module")
def rerank_http() -> Iterator[FakeRerankServer]:
    with serving(FakeRerankServer()) as server:
        yield server


@pytest.fixture(scope="module")
def reranking_server(
    pg_cluster: PgCluster, loop_thread: LoopThread, rerank_http: FakeRerankServer
) -> Iterator[BrainServer]:
    """A brain-server whose reranker reorders the fused top 2, giving up after 0.5 s."""
    settings = server_settings(
        pg_cluster,
        embedder="none",
        reranker_url=rerank_http.url,
        reranker_model="bge-reranker",
        reranker_api_key="rk-test",
        reranker_top_n=2,
        reranker_timeout_seconds=0.5,
    )
    server = BrainServer(cluster=pg_cluster, loop=loop_thread, settings=settings)
    server.start()
    yield server
    server.stop()


async def _filled(server: BrainServer) -> tuple[Api, dict[str, str]]:
    """A fresh bucket holding DOCS; returns the api and letter -> memory id."""
    async with server.channel() as ch:
        api = Api(ch, server.mint_key(unique("rerank"), "agent"))
        ids = {letter: (await api.save(text)).memory.id for letter, text in DOCS.items()}
    return api, ids


async def _search(server: BrainServer, api: Api) -> memory_pb2.SearchMemoriesResponse:
    async with server.channel() as ch:
        stub = Api(ch, api.key).memories
        response: memory_pb2.SearchMemoriesResponse = await stub.SearchMemories(
            memory_pb2.SearchMemoriesRequest(scope=api.scope(), query="alpha", limit=10),
            metadata=api.md,
        )
    return response


@pytest.mark.parametrize("mode", ["cohere", "tei"])
async def test_the_reranker_reorders_the_fused_top_n(
    reranking_server: BrainServer, rerank_http: FakeRerankServer, mode: str
) -> None:
    """The top 2 fused hits (A, B) go to the reranker, which prefers B: B, A, then C.

    The reranker gets the query, the model, the key as bearer and only the top N texts;
    Cohere's and TEI's answer shapes both work.
    """
    rerank_http.reset()
    rerank_http.mode = mode
    api, ids = await _filled(reranking_server)
    response = await _search(reranking_server, api)

    assert response.ranking == memory_pb2.RANKING_RERANKED
    assert [h.memory.id for h in response.hits] == [ids["B"], ids["A"], ids["C"]]
    assert [h.rerank_score for h in response.hits] == [1.0, 0.0, 0.0]
    (sent,) = rerank_http.requests
    assert sent["path"] == "/v1/rerank"
    assert sent["auth"] == "Bearer rk-test"
    assert sent["body"]["model"] == "bge-reranker"
    assert sent["body"]["query"] == "alpha"
    assert sent["body"]["documents"] == [DOCS["A"], DOCS["B"]]


@pytest.mark.parametrize("mode", ["http_error", "partial", "hang_up", "slow"])
async def test_a_failing_reranker_returns_the_fused_order_and_says_so(
    reranking_server: BrainServer, rerank_http: FakeRerankServer, mode: str
) -> None:
    """HTTP 503, a partial answer, a dropped connection or a timeout never fail a search.

    The same server reranks when the endpoint answers (positive control, same bucket).
    """
    rerank_http.reset()
    api, ids = await _filled(reranking_server)
    rerank_http.mode = mode
    failed = await _search(reranking_server, api)
    rerank_http.mode = "cohere"
    healthy = await _search(reranking_server, api)

    assert failed.ranking == memory_pb2.RANKING_FUSED_RERANKER_UNAVAILABLE
    assert [h.memory.id for h in failed.hits] == [ids["A"], ids["B"], ids["C"]]
    assert all(h.rerank_score == 0.0 for h in failed.hits)
    assert healthy.ranking == memory_pb2.RANKING_RERANKED
    assert healthy.hits[0].memory.id == ids["B"]


async def test_without_a_reranker_the_ranking_is_fused(brain_server: BrainServer) -> None:
    """A server with no reranker configured says its hits are in fused order."""
    api, ids = await _filled(brain_server)
    response = await _search(brain_server, api)
    assert response.ranking == memory_pb2.RANKING_FUSED
    assert ids["A"] in [h.memory.id for h in response.hits]


def test_reranker_configuration_is_checked() -> None:
    """No URL means no reranker; a URL without a model, or a zero top N, is an error."""
    assert build_reranker(None, None) is None
    built = build_reranker("http://h:1/v1/", "m", top_n=5)
    assert built is not None and built.endpoint == "http://h:1/v1/rerank" and built.top_n == 5
    with pytest.raises(RerankerError, match="model"):
        build_reranker("http://h:1", None)
    with pytest.raises(RerankerError, match="top N"):
        build_reranker("http://h:1", "m", top_n=0)


async def test_mcp_recall_says_how_the_hits_were_ordered(
    reranking_server: BrainServer, rerank_http: FakeRerankServer, tmp_path: Path
) -> None:
    """brain-mcp's recall names the ranking and shows rerank scores only when reranked;
    with the reranker down it says the fused order came back instead."""
    from .test_mcp_agent import started
    from .test_mcp_proxy import brain_env, call, text_of

    rerank_http.reset()
    api, ids = await _filled(reranking_server)
    env = brain_env(reranking_server.target, api.key, namespace=api.namespace)
    async with started(env, tmp_path / "err") as (session, _):
        reranked = await call(session, "recall", query="alpha")
        rerank_http.mode = "http_error"
        fallback = await call(session, "recall", query="alpha")
    assert not reranked.is_error and not fallback.is_error, text_of(reranked)
    got = reranked.structured_content
    assert got["ranking"] == "reranked" and got["silenced"] is False
    assert [h["id"] for h in got["hits"]] == [ids["B"], ids["A"], ids["C"]]
    assert got["hits"][0]["rerank_score"] == 1.0 and "rerank_score" not in got["hits"][2]
    assert "reordered by reading query and passages" in text_of(reranked)
    down = fallback.structured_content
    assert down["ranking"] == "fused_reranker_unavailable"
    assert [h["id"] for h in down["hits"]] == [ids["A"], ids["B"], ids["C"]]
    assert all("rerank_score" not in h for h in down["hits"])
    assert "the reranker was unavailable" in text_of(fallback)


# -- knowledge search: the same reranker reorders an answered search's top N ---------------

PASSAGES = {
    "a.md": "alpha alpha alpha report",
    "b.md": "# Team memo\n\nalpha alpha",
    "c.md": "alpha note",
}


async def _knowledge(server: BrainServer, **kw: Any) -> tuple[Api, Any]:
    """A fresh bucket holding PASSAGES, searched for "alpha" (lexical, top 10)."""
    from brain.v1 import knowledge_pb2

    from .test_knowledge import KB, put, search

    async with server.channel() as ch:
        api = Api(ch, server.mint_key(unique("rerank-kb"), "agent", permissions=KB))
        for path, text in PASSAGES.items():
            await put(api, path, text)
        response: knowledge_pb2.SearchKnowledgeResponse = await search(
            api, "alpha", limit=10, lexical_only=True, **kw
        )
    return api, response


async def test_the_reranker_reorders_knowledge_hits_reading_their_headings(
    reranking_server: BrainServer, rerank_http: FakeRerankServer
) -> None:
    """The fused top 2 chunks (a, b) go to the reranker as heading path and text; it prefers
    the memo: b, a, then c, with their scores. A failing reranker returns the fused order and
    says so; a search the floor silenced asks the reranker nothing."""
    from brain.v1 import knowledge_pb2

    rerank_http.reset()
    _, response = await _knowledge(reranking_server)
    assert response.ranking == knowledge_pb2.KNOWLEDGE_RANKING_RERANKED
    assert [h.source.path for h in response.hits] == ["b.md", "a.md", "c.md"]
    assert [h.rerank_score for h in response.hits] == [1.0, 0.0, 0.0]
    (sent,) = rerank_http.requests
    memo = next(h for h in response.hits if h.source.path == "b.md")
    assert sent["body"]["query"] == "alpha"
    assert sent["body"]["documents"] == [PASSAGES["a.md"], f"Team memo\n\n{memo.content}"]

    rerank_http.reset()
    rerank_http.mode = "http_error"
    _, down = await _knowledge(reranking_server)
    assert down.ranking == knowledge_pb2.KNOWLEDGE_RANKING_FUSED_RERANKER_UNAVAILABLE
    assert [h.source.path for h in down.hits] == ["a.md", "b.md", "c.md"]
    assert all(h.rerank_score == 0.0 for h in down.hits)

    rerank_http.reset()
    _, silent = await _knowledge(reranking_server, min_relevance=0.99)
    assert list(silent.hits) == [] and silent.below_floor == 3
    assert silent.ranking == knowledge_pb2.KNOWLEDGE_RANKING_FUSED
    assert rerank_http.requests == []


async def test_mcp_search_knowledge_says_how_the_passages_were_ordered(
    reranking_server: BrainServer, rerank_http: FakeRerankServer, tmp_path: Path
) -> None:
    """brain-mcp's search_knowledge names the ranking and shows rerank scores only when the
    reranker ordered the passages; with it down it says the fused order came back."""
    from .test_mcp_agent import started
    from .test_mcp_proxy import brain_env, call, text_of

    rerank_http.reset()
    api, _ = await _knowledge(reranking_server)
    env = brain_env(reranking_server.target, api.key, namespace=api.namespace)
    async with started(env, tmp_path / "err") as (session, _):
        reranked = await call(session, "search_knowledge", query="alpha", limit=5)
        rerank_http.mode = "http_error"
        fallback = await call(session, "search_knowledge", query="alpha", limit=5)
    assert not reranked.is_error and not fallback.is_error, text_of(reranked)
    got = reranked.structured_content
    assert got["ranking"] == "reranked" and got["silenced"] is False
    assert [h["source"]["path"] for h in got["hits"]] == ["b.md", "a.md", "c.md"]
    assert got["hits"][0]["rerank_score"] == 1.0 and "rerank_score" not in got["hits"][2]
    assert "reordered by reading query and passages" in text_of(reranked)
    down = fallback.structured_content
    assert down["ranking"] == "fused_reranker_unavailable"
    assert [h["source"]["path"] for h in down["hits"]] == ["a.md", "b.md", "c.md"]
    assert all("rerank_score" not in h for h in down["hits"])
    assert "the reranker was unavailable" in text_of(fallback)
