"""Conflicts never cross a wall (issue 30), with the application's predicate and with
row-level security alone: users, labels and tenants each see their own conflicts, marks
and consolidations, and nothing of the others' — each absence beside its positive control.
"""

from __future__ import annotations

import grpc

from brain.v1 import common_pb2, memory_pb2, review_pb2

from .conftest import BrainServer, unique
from .helpers import Api
from .test_conflicts import NEW, OLD, REVIEWER, WRITER, list_conflicts


async def marks(api: Api, query: str) -> dict[str, list[str]]:
    """For each hit, the ids of the other memories its open conflicts name."""
    response = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(scope=api.scope(), query=query), metadata=api.md
    )
    return {
        h.memory.id: sorted({c.newer_id for c in h.conflicts} | {c.older_id for c in h.conflicts})
        for h in response.hits
    }


async def consolidation_sources(api: Api) -> list[list[str]]:
    response = await api.review.ConsolidateMemories(
        review_pb2.ConsolidateMemoriesRequest(scope=api.scope(), dry_run=True), metadata=api.md
    )
    return [sorted(c.source_ids) for c in response.consolidations]


async def test_users_see_their_own_conflicts_marks_and_clusters_only(
    walled_server: BrainServer,
) -> None:
    server, tenant, ns = walled_server, unique("cw"), unique("ns")
    async with grpc.aio.insecure_channel(server.target) as channel:

        def confined(user: str, perms: str) -> Api:
            key = server.mint_key(tenant, f"{user}-{perms[-6:]}", permissions=perms, user=user)
            return Api(channel, key, ns, user_id=user)

        alice, bob = confined("alice", WRITER), confined("bob", WRITER)
        alice_reviewer, bob_reviewer = confined("alice", REVIEWER), confined("bob", REVIEWER)
        pairs = {}
        for who in (alice, bob):
            old = (await who.save(OLD)).memory.id
            new = await who.save(NEW)
            assert [c.older_id for c in new.conflicts] == [old]  # each sees its own only
            pairs[who.user_id] = (old, new.memory.id, new.conflicts[0].id)
            await who.save("Standup notes are kept in the team wiki")
            await who.save("Standup notes are kept in the team wiki pages")
        for me, reviewer, other in (
            ("alice", alice_reviewer, "bob"),
            ("bob", bob_reviewer, "alice"),
        ):
            listed = {c.id for c in await list_conflicts(reviewer)}
            assert pairs[me][2] in listed and pairs[other][2] not in listed
            seen = await marks(reviewer, "staging database port")
            assert seen[pairs[me][0]] == [pairs[me][0], pairs[me][1]]
            assert pairs[other][0] not in seen and pairs[other][1] not in str(seen)
            [cluster] = await consolidation_sources(reviewer)  # its own cell's, not the other's
            own = {m.id for m in await reviewer.list_all()}
            assert set(cluster) <= own


async def test_labels_and_tenants_wall_off_conflicts(walled_server: BrainServer) -> None:
    server, tenant, ns = walled_server, unique("cw"), unique("ns")
    async with grpc.aio.insecure_channel(server.target) as channel:
        writer = Api(
            channel,
            server.mint_key(tenant, "w", permissions=WRITER, labels=("team", "secret")),
            ns,
        )
        team = Api(channel, server.mint_key(tenant, "t", permissions=REVIEWER), ns)
        cleared = Api(
            channel, server.mint_key(tenant, "s", permissions=REVIEWER, labels=("secret",)), ns
        )
        other_tenant = Api(
            channel, server.mint_key(unique("cw"), "o", permissions=WRITER + ",memories:review"),
            ns,
        )  # fmt: skip
        await writer.save(OLD, labels=["secret"])
        hidden = (await writer.save(NEW, labels=["secret"])).conflicts[0].id
        await writer.save("Deploys happen on Thursday")
        visible = (await writer.save("Deploys happen on Friday now")).conflicts[0].id
        assert {c.id for c in await list_conflicts(team)} == {visible}
        assert {c.id for c in await list_conflicts(cleared)} == {hidden}
        assert all(c.state == common_pb2.CONFLICT_STATE_OPEN for c in await list_conflicts(cleared))
        # Another tenant: its own conflict only (positive control), none of these.
        await other_tenant.save(OLD)
        own = (await other_tenant.save(NEW)).conflicts[0].id
        assert {c.id for c in await list_conflicts(other_tenant)} == {own}
