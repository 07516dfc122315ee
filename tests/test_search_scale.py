"""Search at team scale: no side channel through scores, term statistics kept per cell."""

from __future__ import annotations

import grpc

from brain.v1 import memory_pb2

from .conftest import BrainServer, unique
from .helpers import Api

QUERY = "zeppelin hangar maintenance"
OWN = (
    "the zeppelin hangar needs maintenance on friday",
    "hangar doors were painted blue",
    "maintenance schedule for the zeppelin crew",
    "the zeppelin flies over the harbour",
)
# Rows that would shift IDF and corpus size if they leaked into a caller's statistics.
INVISIBLE = "zeppelin zeppelin hangar report number {i}"


async def ranked(api: Api, mode: int) -> list[tuple[str, float, float]]:
    """(id, fused score, BM25 score) of every hit, best first; the fused score is rounded
    because its recency boost drifts by ~1e-8 while the test runs."""
    response = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(scope=api.scope(), query=QUERY, limit=20, mode=mode),
        metadata=api.md,
    )
    return [(h.memory.id, round(h.score, 5), h.lexical_score) for h in response.hits]


async def test_scores_and_order_ignore_rows_the_caller_cannot_see(
    walled_server: BrainServer,
) -> None:
    """Rows of another user, namespace, label or tenant holding the query's terms change
    neither the scores nor the order a caller gets; a caller who can see them gets other
    scores (the positive control)."""
    server, tenant, namespace = walled_server, unique("t"), unique("ns")
    async with grpc.aio.insecure_channel(server.target) as channel:
        alice = Api(
            channel,
            server.mint_key(tenant, "alice", user="alice", namespaces=(namespace,)),
            namespace=namespace,
            user_id="alice",
        )
        writer = Api(
            channel, server.mint_key(tenant, "writer", labels=("team", "hr")), namespace=namespace
        )
        stranger = Api(channel, server.mint_key(unique("t"), "eve"), namespace=namespace)
        own = [(await alice.save(text)).memory.id for text in OWN]
        modes = (memory_pb2.SEARCH_MODE_LEXICAL, memory_pb2.SEARCH_MODE_HYBRID)
        before = {mode: await ranked(alice, mode) for mode in modes}
        assert {hit[0] for hit in before[memory_pb2.SEARCH_MODE_LEXICAL]} == set(own)
        seen_by_writer = await ranked(writer, memory_pb2.SEARCH_MODE_LEXICAL)

        for i in range(15):
            text = INVISIBLE.format(i=i)
            await writer.save(text, scope=writer.scope(user_id="bob"))  # another user
            await writer.save(text, scope=writer.scope(namespace=unique("other")))
            await writer.save(text, labels=["hr"])  # a label alice does not hold
            await stranger.save(text)  # another tenant

        after = {mode: await ranked(alice, mode) for mode in modes}
        assert after == before
        # Positive control: the writer sees the hr-labelled and bob's rows in this namespace.
        now_seen = await ranked(writer, memory_pb2.SEARCH_MODE_LEXICAL)
        assert len(now_seen) > len(seen_by_writer)
        shared = {hit[0]: hit[2] for hit in seen_by_writer}
        assert any(shared.get(hit[0], hit[2]) != hit[2] for hit in now_seen)
