"""Optional graph extraction (issue 19): a real brain-server calling a real local
OpenAI-compatible /v1/chat/completions HTTP server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from brain.server.domain.graph.extraction import parse_graph
from brain.v1 import common_pb2, graph_pb2, memory_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .graph_helpers import draft, facts, lookup_call, save
from .helpers import Api, JsonEndpoint, rpc_error, serving
from .test_review import candidates, decide

ANSWER = {
    "entities": [{"name": "Nora", "type": "person", "aliases": ["N."]}],
    "relations": [{"subject": "Nora", "predicate": "Works At", "object": "Acme",
                   "single_valued": True}],
}  # fmt: skip
WRITER = "memories:read,memories:write,memories:propose"


class FakeChatServer(JsonEndpoint):
    """Answers every chat completion with ``ANSWER`` (or fails, per ``mode``)."""

    def __init__(self) -> None:
        super().__init__()
        self.mode = "ok"  # ok | fenced | http_error | junk

    def answer(self, body: Any) -> tuple[int, Any] | None:
        if self.mode == "http_error":
            return 500, {"error": "overloaded"}
        content = json.dumps(ANSWER)
        if self.mode == "fenced":
            content = f"```json\n{content}\n```"
        elif self.mode == "junk":
            content = "I could not find anything, sorry."
        return 200, {"choices": [{"message": {"role": "assistant", "content": content}}]}


@pytest.fixture(scope="module")
def chat_http() -> Iterator[FakeChatServer]:
    with serving(FakeChatServer()) as server:
        yield server


@pytest.fixture(scope="module")
def extracting_server(
    pg_cluster: PgCluster, loop_thread: LoopThread, chat_http: FakeChatServer
) -> Iterator[BrainServer]:
    settings = server_settings(
        pg_cluster,
        embedder="none",
        graph_extract_url=chat_http.url,
        graph_extract_model="tiny-llm",
        graph_extract_api_key="gx-test",
        graph_extract_timeout_seconds=5.0,
    )
    server = BrainServer(cluster=pg_cluster, loop=loop_thread, settings=settings)
    server.start()
    yield server
    server.stop()


async def wait_for_candidates(api: Api, count: int) -> list[str]:
    """The proposer's candidates once ``count`` exist (extraction runs after the save)."""
    for _ in range(200):  # at most about 20 s
        if len(found := await candidates(api)) >= count:
            return found
        await asyncio.sleep(0.1)
    return found


async def test_extracted_graph_becomes_a_candidate_and_joins_only_on_approval(
    extracting_server: BrainServer, chat_http: FakeChatServer
) -> None:
    """A memory saved without a graph is sent to the chat endpoint (model, key, the memory
    as the user message); the answer becomes a candidate superseding it with the same
    content, and its entities reach the graph only when a reviewer approves it."""
    chat_http.mode = "ok"
    tenant = unique("gx")
    async with extracting_server.channel() as ch:
        agent = Api(ch, extracting_server.mint_key(tenant, "agent", permissions=WRITER))
        reviewer = Api(
            ch,
            extracting_server.mint_key(
                tenant, "carol", permissions="memories:read,memories:review"
            ),
        )
        saved = (await agent.save("Nora works at Acme since May")).memory
        [candidate_id] = await wait_for_candidates(agent, 1)
        asked = chat_http.requests[-1]
        assert asked["path"] == "/v1/chat/completions"
        assert asked["auth"] == "Bearer gx-test"
        assert asked["body"]["model"] == "tiny-llm"
        assert asked["body"]["messages"][-1]["content"] == "Nora works at Acme since May"
        candidate = await agent.get(candidate_id)
        assert (candidate.content, list(candidate.supersedes)) == (saved.content, [saved.id])
        assert (await rpc_error(lookup_call(agent, "nora"))).code() == grpc.StatusCode.NOT_FOUND

        await decide(reviewer, candidate_id, approve=True)
        found = await lookup_call(agent, "N.")
        assert facts(found) == {("nora", "works_at", "acme")}
        assert found.relations[0].cardinality == graph_pb2.CARDINALITY_ONE
        assert (await agent.get(saved.id)).status == common_pb2.MEMORY_STATUS_SUPERSEDED
        # A memory saved with its own graph is not sent to the endpoint.
        before = len(chat_http.requests)
        await save(agent, "Omar leads Beta", draft([], [("Omar", "leads", "Beta")]))
        await asyncio.sleep(0.2)
        assert len(chat_http.requests) == before


@pytest.mark.parametrize("mode", ["http_error", "junk"])
async def test_a_failing_endpoint_fails_nothing_and_proposes_nothing(
    extracting_server: BrainServer, chat_http: FakeChatServer, mode: str
) -> None:
    """An endpoint answering an error or no JSON leaves the save as it was and proposes
    nothing; the next memory, with the endpoint working, is proposed (the control)."""
    tenant = unique("gx-fail")
    async with extracting_server.channel() as ch:
        agent = Api(ch, extracting_server.mint_key(tenant, "agent", permissions=WRITER))
        chat_http.mode = mode
        seen = len(chat_http.requests)
        saved = await agent.save("Nora works at Acme since May")
        assert saved.outcome == memory_pb2.SAVE_OUTCOME_CREATED
        for _ in range(400):  # the endpoint is asked after the save; at most about 20 s
            if len(chat_http.requests) > seen:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        assert await candidates(agent) == []
        chat_http.mode = "fenced"
        control = (await agent.save("Nora moved to Berlin")).memory
        found = await wait_for_candidates(agent, 1)
        assert len(found) == 1
        assert list((await agent.get(found[0])).supersedes) == [control.id]


async def test_without_an_endpoint_nothing_is_extracted(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The default server has no extractor: a save proposes nothing, and a save with a
    graph still attaches it (the control)."""
    agent = Api(channel, brain_server.mint_key(unique("gx-none"), "agent", permissions=WRITER))
    await agent.save("Nora works at Acme since May")
    await save(agent, "Omar leads Beta", draft([], [("Omar", "leads", "Beta")]))
    assert await candidates(agent) == []
    assert (await lookup_call(agent, "omar")).entity.degree == 1


def test_model_answers_are_parsed_leniently_and_bounded() -> None:
    """Fenced JSON is accepted, malformed items are dropped, predicates are made
    lower_snake_case; text that is not a JSON object is an ExtractorError."""
    from brain.server.domain.graph.extraction import ExtractorError

    g = parse_graph(
        '```json\n{"entities": [{"name": " Ann "}, {"name": 3}], "relations": '
        '[{"subject": "Ann", "predicate": "Lives In", "object": "Rome"}, {}]}\n```'
    )
    assert [e.name for e in g.entities] == ["Ann"]
    assert [(r.subject, r.predicate, r.object) for r in g.relations] == [
        ("Ann", "lives_in", "Rome")
    ]
    for bad in ("nothing here", "[1, 2]"):
        with pytest.raises(ExtractorError):
            parse_graph(bad)


def test_a_models_second_type_for_an_entity_and_invisible_names_are_dropped() -> None:
    """A model that types one entity twice keeps its first type (the server would refuse
    the draft, and the whole extraction would be lost); a name of zero-width characters
    is dropped like an empty one. The draft then passes the server's own validation."""
    from datetime import UTC, datetime

    from brain.server.domain.graph import parse_draft

    g = parse_graph(
        '{"entities": [{"name": "Ann", "type": "person"}, {"name": "ANN", "type": "org"},'
        ' {"name": "ann", "type": "Person"}, {"name": "Rome"}, {"name": "rome", "type":'
        ' "place"}, {"name": "\\u200b\\u200c"}]}'
    )
    assert [(e.name, e.type) for e in g.entities] == [
        ("Ann", "person"), ("ANN", ""), ("ann", "Person"), ("Rome", ""), ("rome", "place")
    ]  # fmt: skip
    parsed = parse_draft("graph", g, datetime.now(UTC), None)
    assert sorted((m.name_norm, m.type) for m in parsed.mentions) == [
        ("ann", "person"), ("rome", "place")
    ]  # fmt: skip
    # Relations that contradict each other: the first word stands, repeats are one.
    g = parse_graph(
        '{"relations": [{"subject": "Ann", "predicate": "lives in", "object": "Rome",'
        ' "single_valued": true}, {"subject": "ann", "predicate": "lives_in", "object":'
        ' "Paris", "single_valued": true}, {"subject": "Ann", "predicate": "lives_in",'
        ' "object": "rome"}, {"subject": "Ann", "predicate": "knows", "object": "Bo"},'
        ' {"subject": "Ann", "predicate": "knows", "object": "Cy", "single_valued": true}]}'
    )
    parsed = parse_draft("graph", g, datetime.now(UTC), None)
    assert sorted((r.predicate, r.object, r.cardinality) for r in parsed.relations) == [
        ("knows", "bo", "many"), ("knows", "cy", "many"), ("lives_in", "rome", "one")
    ]  # fmt: skip
