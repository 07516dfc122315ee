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


async def test_mcp_entity_tools_answer_within_the_proxy_scope(brain_server: BrainServer) -> None:
    """lookup_entity and entity_neighbours through the real MCP client: the proxy's user
    finds its entity and relations; another user's proxy gets NOT_FOUND for it and still
    finds its own (the positive control)."""
    from .test_mcp_proxy import brain_env, call, mcp_session, text_of

    tenant, ns = unique("t"), unique("ns")
    keys = {
        u: brain_server.mint_key(tenant, f"agent:{u}", permissions=RW, user=u, namespaces=(ns,))
        for u in ("alice", "bob")
    }
    for user, fact in (("alice", ("Vega", "orbits", "Lyra")), ("bob", ("Rigel", "in", "Orion"))):
        scope = Scope(namespace=ns, user_id=user)
        with BrainClient(brain_server.target, keys[user], scope=scope) as client:
            client.save(f"{fact[0]} {fact[1]} {fact[2]}", graph=graph_draft([], [fact]))
    async with (
        mcp_session(brain_env(brain_server.target, keys["alice"], "alice", ns)) as alice,
        mcp_session(brain_env(brain_server.target, keys["bob"], "bob", ns)) as bob,
    ):
        found = await call(alice, "lookup_entity", name="vega")
        assert not found.is_error, text_of(found)
        assert found.structured_content["entity"]["name"] == "Vega"
        assert [r["object"] for r in found.structured_content["relations"]] == ["Lyra"]
        assert "Vega -orbits-> Lyra" in text_of(found)
        near = await call(alice, "entity_neighbours", name="Lyra", depth=2)
        assert [n["entity"]["name"] for n in near.structured_content["neighbours"]] == ["Vega"]
        hidden = await call(bob, "lookup_entity", name="vega")
        assert hidden.is_error and text_of(hidden).startswith("NOT_FOUND: ")
        own = await call(bob, "lookup_entity", name="rigel")
        assert own.structured_content["entity"]["degree"] == 1
        bad = await call(alice, "entity_neighbours", name="vega", depth=7)
        assert bad.is_error


async def test_an_agent_says_through_mcp_whom_a_memory_is_about(brain_server: BrainServer) -> None:
    """remember and propose_memory take ``about`` (names, with a type): the entities join the
    graph under the proxy's scope, where lookup_entity finds them, and another user's proxy
    does not (its own is the positive control). An ``about`` the schema does not allow is
    INVALID_ARGUMENT naming the item, and nothing is written."""
    from .test_mcp_proxy import brain_env, call, mcp_session, text_of

    tenant, ns, tag = unique("t"), unique("ns"), unique("x").split("-")[1]
    keys = {
        u: brain_server.mint_key(tenant, f"agent:{u}", permissions=RW, user=u, namespaces=(ns,))
        for u in ("alice", "bob")
    }
    maren, atlas, bad = f"Maren{tag}", f"Atlas{tag}", f"Nobody{tag}"
    async with (
        mcp_session(brain_env(brain_server.target, keys["alice"], "alice", ns)) as alice,
        mcp_session(brain_env(brain_server.target, keys["bob"], "bob", ns)) as bob,
    ):
        about = [{"name": maren, "type": "person"}, {"name": atlas, "type": "project"}]
        saved = await call(alice, "remember", content=f"{maren} leads {atlas}", about=about)
        assert not saved.is_error, text_of(saved)
        proposed = await call(
            bob, "propose_memory", content=f"{maren} joined in May", reason="onboarding",
            about=[{"name": f"Bob{tag}", "type": "person"}],
        )  # fmt: skip
        assert not proposed.is_error, text_of(proposed)
        kept = await call(
            bob, "remember", content=f"Orion{tag} ships on Friday",
            about=[{"name": f"Orion{tag}", "type": "project"}],
        )  # fmt: skip
        assert not kept.is_error, text_of(kept)
        found = await call(alice, "lookup_entity", name=maren.lower())
        assert found.structured_content["entity"]["types"] == ["person"]
        project = await call(alice, "lookup_entity", name=atlas)
        assert project.structured_content["entity"]["types"] == ["project"]
        hidden = await call(bob, "lookup_entity", name=atlas)
        assert hidden.is_error and text_of(hidden).startswith("NOT_FOUND: ")
        own = await call(bob, "lookup_entity", name=f"orion{tag}")  # the positive control
        assert own.structured_content["entity"]["types"] == ["project"]
        for wrong, says in (
            ([{"type": "person"}], "'about[0].name' is required"),
            ([{"name": bad, "role": "lead"}], "'about[0]' takes 'name' and 'type' only"),
            ([{"name": bad, "type": 7}], "'about[0].type' must be a string"),
            ("Maren", "'about' must be an array of objects"),
            # The server's own checks, named by the same position:
            (
                [{"name": bad, "type": "person"}, {"name": bad.upper(), "type": "project"}],
                "graph.entities[1].type",
            ),
            ([{"name": "\u200b"}], "graph.entities[0].name: must contain a visible character"),
        ):
            refused = await call(alice, "remember", content=f"{bad} was here", about=wrong)
            assert refused.is_error and says in text_of(refused), text_of(refused)
        nothing = await call(alice, "lookup_entity", name=bad)
        assert nothing.is_error and text_of(nothing).startswith("NOT_FOUND: ")
        assert (await call(alice, "recall", query=f"{bad} was here")).structured_content[
            "hits"
        ] == []
        # The same recall finds what alice did write (the positive control).
        mine = await call(alice, "recall", query=f"{maren} leads {atlas}")
        assert saved.structured_content["id"] in [h["id"] for h in mine.structured_content["hits"]]
