"""Embedders: the local MiniLM model for real, and the OpenAI client against a real HTTP server."""

from __future__ import annotations

import asyncio
import math
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brain.server.domain.retrieval.embedders import (
    EmbedderError,
    LocalEmbedder,
    NoEmbedder,
    OpenAIEmbedder,
    build_embedder,
)

from .helpers import JsonEndpoint, serving


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def is_unit(vector: list[float]) -> bool:
    return math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-5)


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder()


async def test_local_gives_384_dimensional_unit_vectors(local: LocalEmbedder) -> None:
    """The local embedder returns one 384-float unit vector per text, in input order."""
    vectors = await local.embed(["Hello there.", "", "A third, somewhat longer text."])
    assert local.dimension == 384
    assert [len(v) for v in vectors] == [384, 384, 384]
    assert all(is_unit(v) for v in vectors)


async def test_local_matches_published_minilm_similarities(local: LocalEmbedder) -> None:
    """Cosines match sentence-transformers' all-MiniLM-L6-v2 quickstart (0.666, 0.105, 0.141)."""
    weather, sunny, stadium = await local.embed(
        ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    )
    assert cosine(weather, sunny) == pytest.approx(0.6660, abs=0.02)
    assert cosine(weather, stadium) == pytest.approx(0.1046, abs=0.02)
    assert cosine(sunny, stadium) == pytest.approx(0.1411, abs=0.02)


async def test_local_paraphrases_score_higher_than_unrelated(local: LocalEmbedder) -> None:
    """Each paraphrase pair is far more similar than the same sentence and an unrelated one."""
    pairs = [
        ("How do I reset my password?", "What are the steps to change my login password?"),
        (
            "The deploy failed because the database was down.",
            "The deployment broke since the database was offline.",
        ),
        (
            "Melanie took her kids camping last weekend.",
            "Last weekend Melanie went camping with her children.",
        ),
    ]
    unrelated = "Bananas are a good source of potassium."
    flat = [text for pair in pairs for text in pair] + [unrelated]
    vectors = await local.embed(flat)
    other = vectors[-1]
    for i in range(len(pairs)):
        first, second = vectors[2 * i], vectors[2 * i + 1]
        assert cosine(first, second) > 0.6
        assert cosine(first, second) > cosine(first, other) + 0.4


async def test_local_vector_does_not_depend_on_batch(local: LocalEmbedder) -> None:
    """A text gets the same vector alone as in a padded batch where it is reordered by length."""
    short, long = "Short note.", "A much longer memory about the quarterly planning meeting " * 8
    together = await local.embed([long, short])
    alone = [(await local.embed([long]))[0], (await local.embed([short]))[0]]
    for batched, single in zip(together, alone, strict=True):
        assert cosine(batched, single) > 0.99999


async def test_local_truncates_to_256_tokens(local: LocalEmbedder) -> None:
    """Tokens up to the 256th change the vector; tokens past it are ignored, never an error."""
    head = "cat " * 200  # one token per word
    near_a, near_b, far_a, far_b = await local.embed(
        [head + "dog " * 40, head + "car " * 40, head * 2 + "dog", head * 2 + "car"]
    )
    assert cosine(near_a, near_b) < 0.9999
    assert cosine(far_a, far_b) > 0.99999
    assert is_unit(far_a)


async def test_local_does_not_block_the_event_loop(local: LocalEmbedder) -> None:
    """Other coroutines keep running while the local model computes a large batch."""
    await local.embed(["load the model first"])
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            await asyncio.sleep(0.005)
            ticks += 1

    task = asyncio.create_task(ticker())
    await local.embed([f"memory number {i} about the weekly sync" for i in range(200)])
    done.set()
    await task
    assert ticks >= 10  # a blocked loop would tick once at most


async def test_local_missing_model_file_raises_embedder_error(tmp_path: Path) -> None:
    """A model file that is not there surfaces as EmbedderError, not an onnxruntime error."""
    broken = LocalEmbedder(model_path=tmp_path / "missing.onnx")
    with pytest.raises(EmbedderError, match="local embedder failed"):
        await broken.embed(["anything"])


async def test_every_embedder_maps_no_texts_to_no_vectors(local: LocalEmbedder) -> None:
    """embed([]) returns [] for none, local and openai without doing any work."""
    unreachable = OpenAIEmbedder(url="http://127.0.0.1:9", model="m", dimension=3)
    for embedder in (NoEmbedder(), local, unreachable):
        assert await embedder.embed([]) == []
    assert [len(v) for v in await local.embed(["one text"])] == [384]  # control: one text


async def test_none_embedder_has_no_vectors() -> None:
    """The none embedder has dimension 0 and refuses to embed a text."""
    embedder = build_embedder("none")
    assert (embedder.name, embedder.dimension) == ("none", 0)
    with pytest.raises(EmbedderError, match="lexical search only"):
        await embedder.embed(["text"])


def test_build_embedder_checks_its_configuration() -> None:
    """Unknown names, a wrong fixed dimension and incomplete openai settings are refused."""
    assert build_embedder("local", dimension=384).name == "local"
    with pytest.raises(EmbedderError, match="unknown embedder 'bert'"):
        build_embedder("bert")
    with pytest.raises(EmbedderError, match="dimension 384, not the configured 768"):
        build_embedder("local", dimension=768)
    with pytest.raises(EmbedderError, match="needs an endpoint URL"):
        build_embedder("openai", openai_url="http://127.0.0.1:1", openai_model="m")
    built = build_embedder(
        "openai", openai_url="http://127.0.0.1:1/", openai_model="m", dimension=8
    )
    assert isinstance(built, OpenAIEmbedder)
    assert built.endpoint == "http://127.0.0.1:1/v1/embeddings"
    assert built.dimension == 8


class FakeEmbeddingServer(JsonEndpoint):
    """A real OpenAI-style embeddings server on 127.0.0.1; tests set how it answers."""

    def __init__(self) -> None:
        super().__init__()
        self.dimension = 4
        self.status = 200
        self.delay = 0.0

    def answer(self, body: Any) -> tuple[int, Any]:
        self.released.wait(self.delay)
        if self.status != 200:
            return self.status, {"error": {"message": "model not loaded"}}
        # Unnormalised vectors that differ per text, listed in reverse index order.
        data = [
            {"index": i, "embedding": [float(len(text) + 1)] + [1.0] * (self.dimension - 1)}
            for i, text in enumerate(body["input"])
        ]
        return 200, {"object": "list", "data": data[::-1], "model": body["model"]}


@pytest.fixture
def http_server() -> Iterator[FakeEmbeddingServer]:
    with serving(FakeEmbeddingServer()) as server:
        yield server


async def test_openai_returns_unit_vectors_in_order(http_server: FakeEmbeddingServer) -> None:
    """Vectors come back normalised, in input order, one request per batch, key as bearer."""
    embedder = OpenAIEmbedder(
        url=http_server.url + "/v1", model="nomic", dimension=4, api_key="sk-test", batch_size=2
    )
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    vectors = await embedder.embed(texts)
    assert all(is_unit(v) for v in vectors)
    expected = [(len(t) + 1) / math.sqrt((len(t) + 1) ** 2 + 3) for t in texts]
    assert [v[0] for v in vectors] == pytest.approx(expected)
    assert [r["body"]["input"] for r in http_server.requests] == [
        ["a", "bb"],
        ["ccc", "dddd"],
        ["eeeee"],
    ]
    assert {r["path"] for r in http_server.requests} == {"/v1/embeddings"}
    assert {r["auth"] for r in http_server.requests} == {"Bearer sk-test"}
    assert {r["body"]["model"] for r in http_server.requests} == {"nomic"}


async def test_openai_dimension_mismatch_is_an_error(http_server: FakeEmbeddingServer) -> None:
    """A model that returns vectors of another size than configured raises EmbedderError."""
    http_server.dimension = 768
    embedder = OpenAIEmbedder(url=http_server.url, model="m", dimension=384)
    with pytest.raises(
        EmbedderError, match=r"returns 768-dimensional vectors .* configured for 384"
    ):
        await embedder.embed(["text"])


async def test_openai_http_error_is_an_error(http_server: FakeEmbeddingServer) -> None:
    """An HTTP error status from the endpoint raises EmbedderError naming the status."""
    http_server.status = 503
    embedder = OpenAIEmbedder(url=http_server.url, model="m", dimension=4)
    with pytest.raises(EmbedderError, match=r"HTTP 503.*model not loaded"):
        await embedder.embed(["text"])


async def test_openai_slow_server_times_out(http_server: FakeEmbeddingServer) -> None:
    """An endpoint slower than the timeout raises EmbedderError instead of hanging a write."""
    http_server.delay = 120.0  # answers only at teardown: any result before then is the timeout
    embedder = OpenAIEmbedder(url=http_server.url, model="m", dimension=4, timeout=0.2)
    with pytest.raises(EmbedderError, match="cannot reach"):
        await embedder.embed(["text"])


async def test_openai_server_down_is_an_error() -> None:
    """A port with nothing listening raises EmbedderError telling to check the server."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = OpenAIEmbedder(url=f"http://127.0.0.1:{port}", model="m", dimension=4)
    with pytest.raises(EmbedderError, match="check that the server is running"):
        await embedder.embed(["text"])
