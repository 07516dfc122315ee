"""Reading the best chunks (issue 31): a hybrid knowledge search embeds the sentences of its
first chunks that share a word with the query, and their relevance weighs the query's best
cosine to one of them, so a chunk holding the question's words spread over unrelated
sentences reads weaker than one holding them in one sentence.

No test depends on what a real model thinks of a text: the embedder here is the toy
bag-of-words of test_retrieval (texts sharing words align; the cosines are computed from
it in the test), served as an OpenAI-compatible endpoint to a server of its own, and the
relevance model is one written for the test.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import numpy as np
import pytest

from brain.server.domain.knowledge import reading
from brain.server.domain.knowledge.search import ChunkSearch
from brain.server.domain.retrieval.embedders import EmbedderError
from brain.server.domain.retrieval.lanes import FusedHit
from brain.server.domain.retrieval.relevance import (
    FEATURES,
    KNOWLEDGE_HYBRID_MODEL,
    KNOWLEDGE_READING_MODEL,
    ORDER_FEATURES,
    RelevanceModel,
)
from brain.v1 import knowledge_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api, check_off_unless_told_on, serving
from .test_knowledge import ALL, SwitchableEmbeddings, get_call, put, search, session_filler_held
from .test_knowledge_filler import QUICK
from .test_retrieval import toy_vector

READING = FEATURES.index("reading")


def cosine(a: str, b: str) -> float:
    return float(np.dot(toy_vector(a), toy_vector(b)))


def reading_only(weight: float = 20.0, bias: float = -14.0) -> RelevanceModel:
    """A relevance that weighs the reading alone (the knowledge order, which ignores it)."""
    weights = [0.0] * len(FEATURES)
    weights[READING] = weight
    return RelevanceModel(KNOWLEDGE_HYBRID_MODEL.order, tuple(weights), bias, floor=0.5)


class ToyEmbedder:
    """The toy vectors in process, recording every batch it was asked to embed."""

    name = "toy"
    dimension = 384

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.batches: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.fail:
            raise EmbedderError("toy embedder down")
        self.batches.append(list(texts))
        return [toy_vector(t) for t in texts]


def hit(content: str) -> FusedHit:
    return FusedHit(row={"content": content, "document_id": content}, score=0.0, relevance=0.25)


def test_a_chunk_reads_as_its_lines_cut_at_sentence_ends() -> None:
    text = (
        "# Rollback\n\n- Stop the deploy. Then run `make undo`.\n| region | eu-1 |\n"
        "Version 1.2 is e.g. the last one. (Ask first.)\nok\n"
    )
    assert reading.sentences(text) == [
        "Rollback",
        "Stop the deploy.",
        "Then run `make undo`.",
        "region | eu-1",
        "Version 1.2 is e.g. the last one.",
        "(Ask first.)",
    ]
    assert reading.sentences("ok") == ["ok"]  # nothing long enough: the text itself
    many = "\n".join(f"line {i}" for i in range(100))
    assert len(reading.sentences(many)) == reading.MAX_SENTENCES


def test_only_sentences_sharing_a_word_with_the_query_are_read() -> None:
    asked = reading.words("How do I rotate the Redis passwords?")
    assert asked == {"rotat", "redis", "passw"}  # stems; question words left out
    chunk = "Redis runs on three nodes.\nThe rotation of passwords is monthly.\nCall Bob."
    assert reading.worth_reading(chunk, asked) == [
        "Redis runs on three nodes.",
        "The rotation of passwords is monthly.",
    ]
    # A chunk sharing no word (a reworded question the semantic lane found): its first ones.
    assert reading.worth_reading("Call Bob. Then Alice.", asked) == ["Call Bob.", "Then Alice."]
    assert reading.READ_SENTENCES == 4
    many = "\n".join(["Call Bob.", "Redis one.", "Redis two.", "Redis passwords rotate.",
                      "Redis three.", "Redis four.", "Redis five."])  # fmt: skip
    assert reading.worth_reading(many, asked) == [
        "Redis one.",
        "Redis two.",
        "Redis passwords rotate.",
        "Redis three.",
    ]  # the most shared words first (3 here), then the earlier; kept in chunk order
    unrelated = "\n".join(f"Line {i} here." for i in range(9))
    assert reading.worth_reading(unrelated, asked) == [f"Line {i} here." for i in range(4)]


async def test_the_first_chunks_get_their_best_sentences_cosine_in_one_batch() -> None:
    query = "alpha beta gamma"
    hits = [
        hit("Alpha beta gamma switch. Other words."),
        hit("The alpha one. The beta two. Unrelated line."),
        hit("Nothing shared here. None at all."),
        hit("alpha beta gamma, but fourth"),
    ]
    embedder = ToyEmbedder()
    await reading.read(embedder, query, toy_vector(query), hits)
    assert embedder.batches == [["Alpha beta gamma switch.", "The alpha one.", "The beta two."]]
    assert hits[0].reading == pytest.approx(cosine(query, "Alpha beta gamma switch."))
    assert hits[1].reading == pytest.approx(cosine(query, "The alpha one."))
    assert hits[0].reading > hits[1].reading > 0
    assert hits[2].reading == hits[3].reading == 0.0  # past READ_TOP: not read
    assert reading.READ_TOP == 2


async def test_reweigh_gives_every_hit_its_relevance_or_keeps_the_unread_one() -> None:
    query = "alpha beta gamma"
    model = reading_only()
    hits = [hit("Alpha beta gamma here."), hit("Alpha. Beta. Gamma."), hit("x y z"), hit("w")]
    decided = await reading.reweigh(
        ToyEmbedder(), query, toy_vector(query), hits, 60, KNOWLEDGE_HYBRID_MODEL, model
    )
    assert decided is model
    for h in hits:
        assert h.relevance == pytest.approx(1 / (1 + math.exp(-(20.0 * h.reading - 14.0))))
    assert hits[0].relevance > 0.5 > hits[1].relevance  # words in one sentence, or spread
    assert hits[3].relevance == pytest.approx(1 / (1 + math.exp(14.0)))  # unread: reading 0

    failed = [hit("Alpha beta gamma here.")]
    decided = await reading.reweigh(
        ToyEmbedder(fail=True), query, toy_vector(query), failed, 60,
        KNOWLEDGE_HYBRID_MODEL, model,
    )  # fmt: skip
    assert decided is KNOWLEDGE_HYBRID_MODEL  # the search decides as if nothing was read
    assert failed[0].relevance == 0.25 and failed[0].reading == 0.0


def test_the_reading_model_weighs_the_reading_and_the_order_never_reads_it() -> None:
    assert "reading" not in ORDER_FEATURES
    assert KNOWLEDGE_READING_MODEL.weights[READING] > 0
    assert KNOWLEDGE_READING_MODEL.order == KNOWLEDGE_HYBRID_MODEL.order
    assert 0 < KNOWLEDGE_READING_MODEL.floor < 1


def test_reading_is_off_unless_the_server_is_told_on(
    monkeypatch: pytest.MonkeyPatch, pg_cluster: PgCluster, loop_thread: LoopThread
) -> None:
    """--knowledge-reading (BRAIN_KNOWLEDGE_READING) is off by default (its gain did not
    hold under another tie order: docs, Knowledge base); off, a server's knowledge search
    reads with no embedder, on with the local one; anything else is refused."""
    check_off_unless_told_on(monkeypatch, "knowledge_reading")

    server = BrainServer(
        cluster=pg_cluster, loop=loop_thread, settings=server_settings(pg_cluster, embedder="none")
    )
    server.start()
    try:
        assert server.running is not None
        assert isinstance(server.running.memories.knowledge, ChunkSearch)
        assert server.running.memories.knowledge.reading_models == {}
    finally:
        server.stop()
    on = BrainServer(
        cluster=pg_cluster, loop=loop_thread,
        settings=server_settings(pg_cluster, embedder="none", knowledge_reading=True),
    )  # fmt: skip
    on.start()
    try:
        assert on.running is not None and isinstance(on.running.memories.knowledge, ChunkSearch)
        assert set(on.running.memories.knowledge.reading_models) == {"local"}  # the control
    finally:
        on.stop()


async def test_a_hybrid_search_reads_its_chunks_through_the_server(
    pg_cluster: PgCluster, loop_thread: LoopThread, brain_server: BrainServer
) -> None:
    """Two collections hold a chunk with the question's words spread over three sentences;
    one also holds a chunk with them in one sentence. With a reading-only relevance and a
    floor of 0.5 the question is answered there (the positive control: the same search) and
    silent in the other, saying how many chunks it held back; each relevance is the one
    the model gives the best sentence's toy cosine."""
    embeddings = SwitchableEmbeddings()
    embeddings.up = True
    with serving(embeddings), session_filler_held(brain_server):
        server = BrainServer(
            cluster=pg_cluster, loop=loop_thread,
            settings=server_settings(pg_cluster, embedder="openai", openai_url=embeddings.url,
                                     openai_model="toy", embedding_dimension=384,
                                     knowledge_reading=True),
        )  # fmt: skip
        server.start()
        try:
            assert server.running is not None and server.running.filler is not None
            # Looks for work every 0.2 s instead of 5 (a put's poke that arrives while it
            # waits for the puts to be quiet is not kept).
            server.running.filler.settings = QUICK
            searching = server.running.memories.knowledge
            assert isinstance(searching, ChunkSearch)
            assert set(searching.reading_models) == {"local"}  # an endpoint's: no reading
            searching.reading_models = {"openai": reading_only()}
            async with server.channel() as channel:
                api = Api(channel, server.mint_key(unique("kb"), "w", permissions=ALL))
                spread = "Alpha one. Beta two. Gamma three."
                together = "Alpha beta gamma switch."
                ids = []
                for collection in ("one", "two"):
                    put_spread = await put(api, "spread.md", spread, collection=collection)
                    ids.append(put_spread.document.id)
                put_together = await put(api, "together.md", together, collection="one")
                ids.append(put_together.document.id)
                for _ in range(200):  # the server's filler embeds them (toy vectors)
                    docs = [(await get_call(api, i)).document for i in ids]
                    if all(d.fully_embedded for d in docs):
                        break
                    await asyncio.sleep(0.05)
                query = "alpha beta gamma"
                answered = await search(api, query, collections=["one"], min_relevance=0.5)
                assert answered.lanes == knowledge_pb2.KNOWLEDGE_LANES_HYBRID
                assert [h.source.path for h in answered.hits] == ["together.md", "spread.md"]
                best = {h.source.path: h.relevance for h in answered.hits}
                for path, sentence in (("together.md", together), ("spread.md", "Alpha one.")):
                    expected = 1 / (1 + math.exp(-(20.0 * cosine(query, sentence) - 14.0)))
                    assert best[path] == pytest.approx(expected, abs=1e-4)
                silent = await search(api, query, collections=["two"], min_relevance=0.5)
                assert list(silent.hits) == [] and silent.below_floor == 1
                assert silent.lanes == knowledge_pb2.KNOWLEDGE_LANES_HYBRID
        finally:
            server.stop()
