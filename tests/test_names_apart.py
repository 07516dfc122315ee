"""Names apart (issue 34): a hybrid search's semantic lane reads the query without the names
of the people the caller's memories assert.

A small sentence embedder lets "Melanie" outweigh "what activities" in "What activities
does Melanie partake in?", so every memory naming her scores alike; the lexical lanes and
the ``named`` feature already match the name. Who is a person is read through the
caller's walls: a person known only from memories the caller cannot see keeps their name
in the query, exactly as a name no memory asserts. The tests read the text the server
asked its embedder for, never what the model thinks of it.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from brain.server.domain.graph.assertions import without_names
from brain.server.measure import names_apart
from brain.server.measure.locomo.data import load_locomo
from brain.v1 import memory_pb2

from .conftest import BrainServer, unique
from .graph_helpers import draft, save
from .helpers import Api, search_params

WRITER = "memories:read,memories:write"


def test_a_query_loses_the_names_whole_with_their_possessives() -> None:
    people = {"melanie", "jon snow"}
    asked = "What activities does Melanie partake in?"
    assert without_names(asked, people) == "What activities does partake in?"
    assert without_names("What is MELANIE\u2019S job now?", people) == "What is job now?"
    assert without_names("When did Jon Snow and Melanie meet in Berlin?", people) == (
        "When did and meet in Berlin?"
    )
    # Part of a name is not the name; a name inside a longer word is not either.
    assert without_names("What does Jon like to eat?", people) == "What does Jon like to eat?"
    assert without_names("Is Melanies a shop in town?", people) == "Is Melanies a shop in town?"
    assert without_names("What did Melanie' dog eat today?", people) == "What did dog eat today?"
    # Too little would be left to ask anything: the query as it is.
    assert without_names("Who is Melanie?", people) == "Who is Melanie?"
    assert without_names(asked, ()) == asked
    # A person called Will: in a query that capitalises, the lower-case "will" is a word;
    # a query typed all in lower case has its name cut all the same.
    will = {"will"}
    assert without_names("When will Will ship the app?", will) == "When will ship the app?"
    assert without_names("when will will ship the app", will) == "when ship the app"


@contextmanager
def embedded_texts(server: BrainServer) -> Iterator[list[str]]:
    """Every query text the in-process server asks its query-vector cache for."""
    vectors = server.running.memories.query_vectors  # type: ignore[union-attr]
    seen: list[str] = []
    plain = vectors.embedded

    async def embedded(embedder: Any, model: str, text: str, *, tenant: str) -> Any:
        seen.append(text)
        return await plain(embedder, model, text, tenant=tenant)

    vectors.embedded = embedded
    try:
        yield seen
    finally:
        vectors.embedded = plain


async def test_only_people_the_caller_sees_are_cut_from_its_semantic_query(
    walled_server: BrainServer,
) -> None:
    """Ann's memory asserts one person and a project, Ben's another person. The same
    hybrid question loses, for each of them, the name of the person they can see and
    keeps the other's and the project's; each finds its own memory (the positive
    control). With ``names_apart`` off the query is read whole."""
    server = walled_server
    if server.running is None:
        pytest.skip("reads the in-process server's query texts")
    tenant, ns = unique("apart"), unique("ns")
    tag = secrets.token_hex(3)
    anna, bert, zephyr = f"Anna{tag}", f"Bert{tag}", f"Zephyr{tag}"
    question = f"Which tea do {anna} and {bert} like on {zephyr}?"
    async with grpc.aio.insecure_channel(server.target) as channel:

        def user(who: str) -> Api:
            key = server.mint_key(tenant, who, permissions=WRITER, user=who)
            return Api(channel, key, ns, user_id=who)

        ann, ben = user("ann"), user("ben")
        mine = draft([(anna, "Person", []), (zephyr, "project", [])])
        ann_tea = (await save(ann, f"{anna} likes green tea on {zephyr}", mine)).memory.id
        ben_tea = (await save(ben, "likes white tea", draft([(bert, "person", [])]))).memory.id
        with embedded_texts(server) as seen:
            assert ann_tea in await ann.search(question)
            assert ben_tea in await ben.search(question)
            with search_params(server.running.memories, names_apart=False):
                assert ann_tea in await ann.search(question)
        assert seen == [
            f"Which tea do and {bert} like on {zephyr}?",
            f"Which tea do {anna} and like on {zephyr}?",
            question,
        ]


async def test_a_query_left_in_a_script_the_embedder_cannot_read_keeps_its_names(
    brain_server: BrainServer,
) -> None:
    """Cutting a Latin-script name from a Russian question would leave Cyrillic alone,
    which the local embedder does not read (it embeds the query only when it is mostly
    Latin script): the query is embedded as asked. The same name in an English question
    is cut (the control)."""
    server = brain_server
    if server.running is None:
        pytest.skip("reads the in-process server's query texts")
    name = f"Alexandrina{secrets.token_hex(3)} Montgomery"
    async with grpc.aio.insecure_channel(server.target) as channel:
        api = Api(channel, server.mint_key(unique("apart"), "w", permissions=WRITER), unique("ns"))
        await save(api, f"{name} likes to paint", draft([(name, "person", [])]))
        russian = f"Что любит делать {name}"
        english = f"What does {name} like to do?"
        with embedded_texts(server) as seen:
            await api.search(russian)
            await api.search(english)
        assert seen == [russian, "What does like to do?"]


async def test_build_context_reads_memories_without_the_names_and_documents_with_them(
    brain_server: BrainServer,
) -> None:
    """BuildContext's memories are searched as SearchMemories searches them; its knowledge
    chunks carry no entities, so they are searched with the query as asked."""
    server = brain_server
    if server.running is None:
        pytest.skip("reads the in-process server's query texts")
    name = f"Carla{secrets.token_hex(3)}"
    async with grpc.aio.insecure_channel(server.target) as channel:
        api = Api(channel, server.mint_key(unique("apart"), "w", permissions=WRITER), unique("ns"))
        await save(api, f"{name} drinks rooibos tea", draft([(name, "person", [])]))
        question = f"Which tea does {name} drink at night?"
        with embedded_texts(server) as seen:
            built = await api.memories.BuildContext(
                memory_pb2.BuildContextRequest(scope=api.scope(), query=question),
                metadata=api.md,
            )
        assert "rooibos" in built.context
        # BuildContext's own vector (for documents), then its memories' semantic lane.
        assert seen == [question, "Which tea does drink at night?"]


def test_the_measure_prints_every_variant_for_each_category(tmp_path: Path) -> None:
    """`python -m brain.server.measure.names_apart` on a tiny LoCoMo file: one row per way
    of reading the question, one column per category asked (the figures are the model's,
    so only their range is checked)."""
    from .test_evaluation import TINY

    data = tmp_path / "tiny.json"
    data.write_text(json.dumps(TINY))
    figures = asyncio.run(names_apart.recall(load_locomo(data), "local"))
    assert list(figures) == list(names_apart.VARIANTS)
    asked = {q["category"] for q in TINY[0]["qa"] if q.get("evidence") and q["category"] < 5}
    for by_category in figures.values():
        assert set(by_category) == asked
        assert all(0.0 <= share <= 1.0 for share in by_category.values())
