"""Query vectors: concurrent queries share one embedder call, repeats come from the cache."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from brain.server.domain.retrieval.embedders import EmbedderError
from brain.server.domain.retrieval.query_vectors import QueryVectors


class SlowEmbedder:
    """A real `Embedder` (the one-method seam): each call takes a while and is recorded."""

    name = "slow"
    dimension = 2

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        await asyncio.sleep(0.05)
        if self.fail:
            raise EmbedderError("down")
        return [[float(len(t)), 1.0] for t in texts]


async def test_concurrent_queries_are_embedded_in_one_batch_and_repeats_are_cached() -> None:
    """Ten queries arriving together cost at most two embedder calls, each gets its own
    vector, a repeat costs none, and another model's vectors are never reused."""
    embedder, vectors = SlowEmbedder(), QueryVectors(cache_size=100)
    texts = [f"query {'x' * i}" for i in range(10)]
    got = await asyncio.gather(*(vectors.vector(embedder, "m1", t, tenant="t") for t in texts))
    assert got == [[float(len(t)), 1.0] for t in texts]
    assert len(embedder.calls) <= 2
    assert sorted(t for call in embedder.calls for t in call) == sorted(texts)
    calls = len(embedder.calls)
    assert await vectors.vector(embedder, "m1", texts[3], tenant="t") == got[3]
    assert len(embedder.calls) == calls  # from the cache
    await vectors.vector(embedder, "m2", texts[3], tenant="t")
    assert len(embedder.calls) == calls + 1  # another model: embedded again


async def test_a_failing_embedder_fails_every_waiter_and_nothing_is_cached() -> None:
    """Every query of a failed batch sees the error; the next call asks the embedder again."""
    embedder, vectors = SlowEmbedder(fail=True), QueryVectors()
    results = await asyncio.gather(
        *(vectors.vector(embedder, "m", t, tenant="t") for t in ("a", "b", "a")),
        return_exceptions=True,
    )
    assert all(isinstance(r, EmbedderError) for r in results)
    assert sum(len(c) for c in embedder.calls) == 2  # "a" in flight once
    embedder.fail = False
    assert await vectors.vector(embedder, "m", "a", tenant="t") == [1.0, 1.0]


async def test_the_cache_keeps_only_the_most_recent_queries() -> None:
    """Past its size the least recently used vector is dropped."""
    embedder, vectors = SlowEmbedder(), QueryVectors(cache_size=2)
    for text in ("a", "b", "a", "c"):  # "b" is the least recently used when "c" arrives
        await vectors.vector(embedder, "m", text, tenant="t")
    calls = len(embedder.calls)
    await vectors.vector(embedder, "m", "a", tenant="t")
    assert len(embedder.calls) == calls
    await vectors.vector(embedder, "m", "b", tenant="t")
    assert len(embedder.calls) == calls + 1


async def test_a_zero_sized_cache_stores_nothing() -> None:
    """cache_size 0 turns the cache off."""
    embedder, vectors = SlowEmbedder(), QueryVectors(cache_size=0)
    await vectors.vector(embedder, "m", "a", tenant="t")
    await vectors.vector(embedder, "m", "a", tenant="t")
    assert len(embedder.calls) == 2


async def test_one_tenants_queries_never_answer_anothers() -> None:
    """The same text from another tenant is embedded again, in flight and from the cache
    alike, so a fast answer never tells one tenant what another asked; the same tenant's
    repeat is the positive control (shared in flight, then cached)."""
    embedder, vectors = SlowEmbedder(), QueryVectors(cache_size=100)
    text = "did anyone ask about the acquisition?"
    together = await asyncio.gather(
        vectors.vector(embedder, "m", text, tenant="a"),
        vectors.vector(embedder, "m", text, tenant="a"),
        vectors.vector(embedder, "m", text, tenant="b"),
    )
    assert together[0] == together[1] == together[2]
    assert sum(call.count(text) for call in embedder.calls) == 2  # once for a, once for b
    calls = len(embedder.calls)
    await vectors.vector(embedder, "m", text, tenant="a")
    assert len(embedder.calls) == calls  # a's repeat: from a's cache
    await vectors.vector(embedder, "m", text, tenant="c")
    assert len(embedder.calls) == calls + 1  # c has never asked it: embedded for c
