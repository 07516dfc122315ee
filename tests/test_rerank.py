"""The optional reranker: a real brain-server calling a real local /v1/rerank HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from brain.server.domain.retrieval.rerankers import RerankerError, build_reranker
from brain.v1 import memory_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api

# BM25 ranks these by how often "alpha" occurs: A, B, C (the fused order).
DOCS = {"A": "alpha alpha alpha report", "B": "alpha alpha memo", "C": "alpha note"}


class FakeRerankServer(ThreadingHTTPServer):
    """A Cohere-style rerank server on 127.0.0.1: documents containing `prefer` score 1."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), RerankHandler)
        self.reset()
        self.released = threading.Event()  # set at teardown: a delayed answer stops waiting

    def reset(self) -> None:
        self.prefer = "memo"
        self.mode = "cohere"  # cohere | tei | http_error | partial | hang_up | slow
        self.requests: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class RerankHandler(BaseHTTPRequestHandler):
    server: FakeRerankServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = self.server.mode
        self.server.requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        if mode == "hang_up":
            self.close_connection = True
            return
        if mode == "slow":
            self.server.released.wait(60)
        scores = [float(self.server.prefer in doc) for doc in body["documents"]]
        results: Any = [{"index": i, "relevance_score": s} for i, s in enumerate(scores)][::-1]
        if mode == "tei":
            results = [{"index": i, "score": s} for i, s in enumerate(scores)]
        elif mode == "partial":
            results = results[:1]
        payload = results if mode == "tei" else {"results": results, "model": body["model"]}
        status = 503 if mode == "http_error" else 200
        raw = json.dumps(payload if status == 200 else {"error": "loading"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def rerank_http() -> Iterator[FakeRerankServer]:
    server = FakeRerankServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.released.set()
    server.shutdown()
    server.server_close()
    thread.join()


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
