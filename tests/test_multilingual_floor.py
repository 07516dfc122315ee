# ruff: noqa: RUF001  (full-width punctuation: the texts are Chinese and Japanese)
"""What an embedder's vectors may decide (issue 34): a query the embedder cannot read is
answered lexically, and for an embedder whose cosine alone tells an answer, a hit that
close to the query's own vector is not silenced by the relevance floor.

Stored vectors and query vectors are set by the tests, so no assertion rests on what a
model thinks of a text.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import grpc
import pytest

from brain.server.domain.retrieval.embedders import LocalEmbedder
from brain.server.domain.retrieval.relevance import FEATURES, HYBRID_MODEL, MULTILINGUAL_MODEL
from brain.server.measure import multilingual
from brain.v1 import knowledge_pb2, memory_pb2

from .conftest import BrainServer, unique
from .helpers import Api
from .test_knowledge import put, search


@pytest.mark.parametrize(
    ("text", "reads"),
    [
        ("When is the budget review?", True),
        ("¿Cuándo es la reunión del equipo?", True),
        ("Wann gibt es wieder Kaffee?", True),
        ("Đội ngũ họp vào thứ Ba", True),  # Vietnamese: Latin with Extended Additional
        ("รหัสผ่านไวไฟของออฟฟิศคืออะไร", False),  # Thai: one [UNK] for MiniLM
        ("产品发布会改到哪天了？", False),
        ("社員旅行の行き先はどこですか？", False),
        ("연말 파티는 어디서 하나요?", False),
        ("एचआर का काम कौन संभालता है?", False),
        ("أين ستقام حفلة نهاية السنة؟", False),
        ("Когда выйдет приложение?", False),
        ("The 东京 office", True),  # mostly Latin letters
    ],
)
def test_the_local_embedder_reads_latin_script_only(text: str, reads: bool) -> None:
    assert LocalEmbedder.reads(text) is reads


async def test_a_query_the_local_embedder_cannot_read_is_answered_lexically(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The session server embeds with `local`: a Thai query gets no vector (its hit has no
    semantic rank), while an English memory found by an English query has one (the
    control: the query's text is the memory's, cosine 1 whatever the model)."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"), namespace=unique("ns"))
    thai, english = "เครื่องพิมพ์ชั้นสองเสีย", "The second floor printer is broken"
    await api.save(thai)
    await api.save(english)
    found = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(scope=api.scope(), query="เครื่องพิมพ์เสีย", limit=5),
        metadata=api.md,
    )
    assert found.hits and found.hits[0].lexical_rank == 1
    assert found.hits[0].semantic_rank == 0 and found.hits[0].semantic_similarity == 0.0
    control = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(scope=api.scope(), query=english, limit=5),
        metadata=api.md,
    )
    assert control.hits and control.hits[0].semantic_rank == 1


async def test_a_knowledge_query_the_local_embedder_cannot_read_is_lexical(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Knowledge search reads queries as memory search does: a Thai query runs the lexical
    lanes (and says so, not as an embedder outage) and still finds its document; an
    English query to the same server is hybrid (the control)."""
    kb = "memories:read,memories:write,knowledge:read,knowledge:write"
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=kb))
    await put(api, "th.md", "# ระบบ\n\nเซิร์ฟเวอร์หลักตั้งอยู่ที่ศูนย์ข้อมูลในกรุงเทพ\n")
    thai = await search(api, "เซิร์ฟเวอร์หลักอยู่ที่ไหน")
    assert thai.lanes == knowledge_pb2.KNOWLEDGE_LANES_LEXICAL
    assert [h.source.path for h in thai.hits] == ["th.md"]
    english = await search(api, "where is the main server?")
    assert english.lanes == knowledge_pb2.KNOWLEDGE_LANES_HYBRID


# The hybrid model with the cosine weighing nothing in the relevance: only the answer
# similarity can then answer by a cosine (the shipped `local` model, refitted with names
# apart, lets a cosine of about 0.75 reach its floor on its own).
NO_COSINE = replace(
    HYBRID_MODEL,
    weights=tuple(
        0.0 if name == "semantic" else w
        for name, w in zip(FEATURES, HYBRID_MODEL.weights, strict=True)
    ),
)


@contextmanager
def answer_similarity(server: BrainServer, value: float | None) -> Iterator[None]:
    """The session server's hybrid model, the cosine weighing nothing in its relevance,
    with another answer similarity, for one test."""
    assert server.running is not None
    memories = server.running.memories
    shipped = memories.params
    memories.params = replace(shipped, hybrid_model=replace(NO_COSINE, answer_similarity=value))
    try:
        yield
    finally:
        memories.params = shipped


async def test_similarity_alone_answers_at_the_models_answer_similarity(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A question sharing no word with its answer: with an answer similarity of 0.9, a
    stored vector at cosine 0.95 to the query answers, one at 0.6 stays silent; without
    one (the `local` model's default) both are silent, and so is an explicit floor (a
    relevance that weighs no cosine: the similarity alone is on trial)."""
    tenant = unique("t")
    api = Api(channel, brain_server.mint_key(tenant, "alice"), namespace=unique("ns"))
    close = (await api.save("The quarterly offsite is in Lisbon")).memory.id
    await api.save("The kitchen is cleaned on Fridays")
    dimension = brain_server.sql(
        """SELECT atttypmod AS d FROM pg_attribute
           WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"""
    )[0]["d"]

    def vector(*head: float) -> list[float]:
        return [*head] + [0.0] * (dimension - len(head))

    brain_server.sql(
        """UPDATE memories m SET embedding = CASE WHEN m.memory_id = $3::uuid
               THEN $1::float4[]::vector ELSE $2::float4[]::vector END
           FROM tenants t WHERE t.tenant_id = m.tenant_id AND t.name = $4""",
        vector(1.0), vector(0.0, 1.0), close, tenant,
    )  # fmt: skip

    async def ask(query: list[float], **kw: float) -> memory_pb2.SearchMemoriesResponse:
        return await api.memories.SearchMemories(
            memory_pb2.SearchMemoriesRequest(
                scope=api.scope(), query="where do we travel together", limit=5,
                query_embedding=query, **kw,
            ),
            metadata=api.md,
        )  # fmt: skip

    near = vector(0.95, 0.0, (1 - 0.95**2) ** 0.5)  # cosine 0.95 to `close`, 0 to the other
    far = vector(0.6, 0.0, 0.8)  # cosine 0.6
    with answer_similarity(brain_server, 0.9):
        answered = await ask(near)
        assert [h.memory.id for h in answered.hits][:1] == [close]
        assert answered.hits[0].semantic_similarity == pytest.approx(0.95, abs=1e-4)
        assert answered.hits[0].relevance < HYBRID_MODEL.floor  # the model alone: silent
        silent = await ask(far)
        assert list(silent.hits) == [] and silent.below_floor == 1
        strict = await ask(near, min_relevance=HYBRID_MODEL.floor)
        assert list(strict.hits) == [] and strict.below_floor == 1
    with answer_similarity(brain_server, None):
        unruled = await ask(near)
        assert list(unruled.hits) == [] and unruled.below_floor == 1


def test_only_the_multilingual_model_answers_by_similarity() -> None:
    """MiniLM's cosines on scripts it cannot read say nothing: it never answers by them."""
    assert HYBRID_MODEL.answer_similarity is None
    assert MULTILINGUAL_MODEL.answer_similarity is not None
    assert 0.8 < MULTILINGUAL_MODEL.answer_similarity < 1.0


@pytest.mark.parametrize(("split", "unanswerable"), [("held-out", 2), ("validation", 4)])
def test_the_other_splits_have_other_questions_and_more_languages(
    split: str, unanswerable: int
) -> None:
    """The held-out and validation splits share no memory or question with dev or with each
    other, hold every dev language and three more, and keep the set's shape (8 memories, 7
    answerable questions, 2 or 4 unanswerable ones per language)."""
    others = {name: multilingual.load(path) for name, path in multilingual.SPLITS.items()}
    held = others.pop(split)
    texts = {m for langs in others.values() for lang in langs for m in lang.memories} | {
        q.text for langs in others.values() for lang in langs for q in lang.questions
    }
    assert not texts & {m for lang in held for m in lang.memories}
    assert not texts & {q.text for lang in held for q in lang.questions}
    assert {lang.code for lang in others["dev"]} < {lang.code for lang in held}
    assert len(held) >= 11
    for lang in held:
        assert len(lang.memories) == 8
        assert sum(q.answer is not None for q in lang.questions) == 7
        assert sum(q.answer is None for q in lang.questions) == unanswerable


async def test_the_answer_similarity_reads_the_querys_own_vector(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Hybrid search moves the query vector toward its best lexical hits; a hit's cosine to
    that moved vector is no evidence of its own. Thirty memories share only a common word
    with the query, at cosine 0.7 to its own vector and 0.86 to the moved one: with an
    answer similarity of 0.8 the search stays silent, though the moved cosine (shown with
    no floor: the control) is above it."""
    tenant = unique("t")
    api = Api(channel, brain_server.mint_key(tenant, "alice"), namespace=unique("ns"))
    for i in range(30):
        await api.save(f"The kitchen rota note {i}")
    dimension = brain_server.sql(
        """SELECT atttypmod AS d FROM pg_attribute
           WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"""
    )[0]["d"]
    brain_server.sql(
        """UPDATE memories m SET embedding = $1::float4[]::vector
           FROM tenants t WHERE t.tenant_id = m.tenant_id AND t.name = $2""",
        [1.0] + [0.0] * (dimension - 1), tenant,
    )  # fmt: skip
    own = [0.7, (1 - 0.49) ** 0.5] + [0.0] * (dimension - 2)  # cosine 0.7 to every memory
    request = memory_pb2.SearchMemoriesRequest(
        scope=api.scope(), query="kitchen budget plan approval", limit=5, query_embedding=own
    )
    with answer_similarity(brain_server, 0.8):
        silent = await api.memories.SearchMemories(request, metadata=api.md)
        assert list(silent.hits) == [] and silent.below_floor == 5
        request.min_relevance = 0.0
        shown = await api.memories.SearchMemories(request, metadata=api.md)
    assert shown.hits and all(h.lexical_rank for h in shown.hits)
    assert min(h.semantic_similarity for h in shown.hits) > 0.8  # the moved vector's cosine
