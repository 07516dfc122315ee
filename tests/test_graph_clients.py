"""The entity graph through the Python clients (sync and async) and the MCP tools."""

from __future__ import annotations

import pytest

from brain.clients import AsyncBrainClient, BrainClient, NotFound, Scope, graph_draft, time_travel

from .conftest import BrainServer, unique

RW = "memories:read,memories:write,memories:propose"


def test_sync_client_saves_updates_and_reads_the_graph(brain_server: BrainServer) -> None:
    """save/update carry a graph_draft; lookup_entity and neighbours read it back, time
    travel included, and an unknown name raises NotFound."""
    ns = unique("ns")
    key = brain_server.mint_key(unique("t"), "alice", permissions=RW, namespaces=(ns,))
    with BrainClient(brain_server.target, key, scope=Scope(namespace=ns)) as client:
        saved = client.save(
            "Ann leads Kite",
            graph=graph_draft([("Ann Lee", "person", ["Annie"])], [("Annie", "leads", "Kite")]),
        )
        found = client.lookup_entity("annie")
        assert (found.entity.name, list(found.entity.aliases)) == ("Ann Lee", ["Annie"])
        assert [(r.predicate, r.object.name) for r in found.relations] == [("leads", "Kite")]
        before = client.lookup_entity("kite").entity.id
        client.update(saved.memory.id, graph=graph_draft([], [("Ann Lee", "leads", "Comet")]))
        assert [n.entity.name for n in client.neighbours("ann lee").neighbours] == ["Comet"]
        with pytest.raises(NotFound):
            client.lookup_entity("kite")
        old = client.lookup_entity("ann lee", time=time_travel(as_of=saved.memory.recorded_at))
        assert [r.object.id for r in old.relations] == [before]


async def test_async_client_reads_the_graph(brain_server: BrainServer) -> None:
    """AsyncBrainClient has the same graph methods."""
    ns = unique("ns")
    key = brain_server.mint_key(unique("t"), "agent:async", permissions=RW, namespaces=(ns,))
    async with AsyncBrainClient(brain_server.target, key, scope=Scope(namespace=ns)) as client:
        await client.save("Dan mentors Eve", graph=graph_draft([], [("Dan", "mentors", "Eve")]))
        assert (await client.lookup_entity("eve")).entity.degree == 1
        hops = await client.neighbours("dan", depth=2)
        assert [(n.entity.name, n.depth) for n in hops.neighbours] == [("Eve", 1)]
        with pytest.raises(NotFound):
            await client.lookup_entity("nobody at all")
