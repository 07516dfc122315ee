"""The optional model judge of conflicts (issue 30): a real HTTP chat endpoint on loopback
advises on each open conflict after the write commits; its verdict is shown to reviewers,
a rejected conflict stops marking hits, and nothing is decided or changed by it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from brain.server.domain.conflicts.judge import JudgeError, parse_verdict
from brain.v1 import common_pb2, memory_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api, JsonEndpoint, serving
from .test_conflicts import REVIEWER, WRITER, list_conflicts


class FakeJudge(JsonEndpoint):
    """Rejects a conflict whose newer statement mentions a rota, confirms the rest, or
    fails every call when ``failing``."""

    failing = False

    def answer(self, body: Any) -> tuple[int, Any] | None:
        if self.failing:
            return 500, {"error": "overloaded"}
        asked = body["messages"][-1]["content"]
        verdict = "rejected" if "rota" in asked.split("NEWER:")[-1] else "confirmed"
        content = json.dumps({"verdict": verdict, "reason": f"{verdict} for the test"})
        return 200, {"choices": [{"message": {"role": "assistant", "content": content}}]}


@pytest.fixture(scope="module")
def judge_http() -> Iterator[FakeJudge]:
    with serving(FakeJudge()) as server:
        yield server


@pytest.fixture(scope="module")
def judged_server(
    pg_cluster: PgCluster, loop_thread: LoopThread, judge_http: FakeJudge
) -> Iterator[BrainServer]:
    settings = server_settings(
        pg_cluster, embedder="none", conflict_judge_url=judge_http.url,
        conflict_judge_model="tiny-judge", conflict_judge_api_key="cj-test",
    )  # fmt: skip
    server = BrainServer(cluster=pg_cluster, loop=loop_thread, settings=settings)
    server.start()
    yield server
    server.stop()


def test_a_verdict_is_json_or_an_error() -> None:
    assert parse_verdict('```json\n{"verdict": "Confirmed", "reason": "same port"}\n```') == (
        "confirmed",
        "same port",
    )
    for junk in ("yes", '{"verdict": "maybe"}', "[]"):
        with pytest.raises(JudgeError):
            parse_verdict(junk)


async def judged(api: Api, conflict_id: str) -> common_pb2.Conflict:
    """The conflict once the judge's verdict is stored (it runs after the write)."""
    for _ in range(200):  # at most about 20 s
        [found] = [c for c in await list_conflicts(api) if c.id == conflict_id]
        if found.judge:
            return found
        await asyncio.sleep(0.1)
    return found


async def test_the_judge_advises_and_decides_nothing(
    judged_server: BrainServer, judge_http: FakeJudge
) -> None:
    tenant, ns = unique("cj"), unique("ns")
    async with grpc.aio.insecure_channel(judged_server.target) as channel:
        writer = Api(channel, judged_server.mint_key(tenant, "agent:w", permissions=WRITER), ns)
        reviewer = Api(channel, judged_server.mint_key(tenant, "carol", permissions=REVIEWER), ns)
        port_old = (await writer.save("The staging database listens on port 5433")).memory.id
        port = (await writer.save("The staging database now listens on port 5434")).conflicts[0]
        rota_old = (await writer.save("The on-call rota starts on Monday")).memory.id
        rota = (await writer.save("The on-call rota now starts on Tuesday")).conflicts[0]
        confirmed, rejected = await judged(reviewer, port.id), await judged(reviewer, rota.id)
        assert confirmed.judge.startswith("confirmed by tiny-judge")
        assert rejected.judge.startswith("rejected by tiny-judge")
        # Advice only: both still open, both memories still active.
        assert {confirmed.state, rejected.state} == {common_pb2.CONFLICT_STATE_OPEN}
        assert (await writer.get(rota_old)).status == common_pb2.MEMORY_STATUS_ACTIVE
        assert judge_http.requests[-1]["auth"] == "Bearer cj-test"

        async def marked(query: str, memory_id: str) -> bool:
            response = await writer.memories.SearchMemories(
                memory_pb2.SearchMemoriesRequest(scope=writer.scope(), query=query),
                metadata=writer.md,
            )
            return any(h.conflicts for h in response.hits if h.memory.id == memory_id)

        assert await marked("staging database port", port_old)  # confirmed: marked
        assert not await marked("on-call rota", rota_old)  # rejected: not marked

        # A failing endpoint leaves the conflict unjudged and the write untouched.
        judge_http.failing = True
        try:
            await writer.save("Team lunch is at 12pm")
            late = (await writer.save("Team lunch moved to 1pm")).conflicts[0]
            await asyncio.sleep(0.5)
            [still] = [c for c in await list_conflicts(reviewer) if c.id == late.id]
            assert still.judge == "" and still.state == common_pb2.CONFLICT_STATE_OPEN
        finally:
            judge_http.failing = False
