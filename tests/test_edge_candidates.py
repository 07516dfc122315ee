"""Issue 11, class 4: a proposal that was never admitted (pending, rejected or withdrawn) is
visible to its proposer and to reviewers, on every read, and to no other key; once
approved it is an ordinary memory, candidate version included. Runs with the application's
predicate and with row-level security alone."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import grpc

from brain.v1 import common_pb2, review_pb2

from .conftest import BrainServer, unique
from .edge import (
    EVERY_STATUS,
    RANDOM_ID,
    collection_reads,
    first_event,
    hidden_like_random,
    outcome,
)
from .helpers import Api
from .test_review import decide, propose

AGENT = "memories:read,memories:propose"


async def test_proposals_reach_only_their_proposer_and_reviewers(
    walled_server: BrainServer,
) -> None:
    """Pending and rejected proposals answer like a random id to a reader and to another
    proposer on Get and History, and appear on no collection path for them; the proposer and
    a reviewer see them everywhere; an approved proposal is visible to all, with history."""
    tenant = unique("edge-c")
    server = walled_server
    start = first_event(server.cluster.pepper)
    async with grpc.aio.insecure_channel(server.target) as channel:
        proposer = Api(channel, server.mint_key(tenant, "agent:p", permissions=AGENT))
        other = Api(channel, server.mint_key(tenant, "agent:o", permissions=AGENT))
        reader = Api(channel, server.mint_key(tenant, "reader", permissions="memories:read"))
        reviewer = Api(
            channel, server.mint_key(tenant, "carol", permissions="memories:read,memories:review")
        )
        writer = Api(channel, server.mint_key(tenant, "writer"))

        active = (await writer.save("candidate heron active fact")).memory.id
        pending = (await propose(proposer, "candidate heron pending fact")).id
        rejected = (await propose(proposer, "candidate heron rejected fact")).id
        await decide(reviewer, rejected, approve=False, reason="not true")
        approved = (await propose(other, "candidate heron approved fact")).id
        await decide(reviewer, approved, approve=True, reason="true")
        sentinel = (await writer.save("candidate heron sentinel")).memory.id
        proposals = {pending, rejected}

        for outsider in (reader, other):
            for memory_id in proposals:
                assert await hidden_like_random(outsider, memory_id)
            seen = await collection_reads(
                outsider, "heron", sentinel=sentinel, statuses=EVERY_STATUS, start=start
            )
            for path in (seen.search, seen.listed, seen.context, seen.exported_ids,
                         seen.watched_ids):  # fmt: skip
                assert not path & proposals
                assert {active, approved} <= path  # positive control
            history = await outsider.history(approved)
            assert [v.status for v in history] == [
                common_pb2.MEMORY_STATUS_CANDIDATE,
                common_pb2.MEMORY_STATUS_ACTIVE,
            ]

        for insider in (proposer, reviewer):
            for memory_id in proposals:
                assert (await insider.get(memory_id)).id == memory_id
                assert (await insider.history(memory_id))[0].version == 1
            seen = await collection_reads(
                insider, "heron", sentinel=sentinel, statuses=EVERY_STATUS, start=start
            )
            for path in (seen.search, seen.listed, seen.context, seen.exported_ids,
                         seen.watched_ids):  # fmt: skip
                assert proposals | {active, approved} <= path

        # Default recall is of active memories only, even for the proposer.
        recalled = await proposer.search("heron")
        assert pending not in recalled
        assert active in recalled  # positive control


async def test_withdrawing_another_proposers_candidate_answers_like_a_random_id(
    walled_server: BrainServer,
) -> None:
    """WithdrawCandidate of someone else's candidate fails exactly as for a random id; the
    proposer's own withdrawal works and leaves the withdrawn proposal visible to it."""
    tenant = unique("edge-w")
    async with grpc.aio.insecure_channel(walled_server.target) as channel:
        proposer = Api(channel, walled_server.mint_key(tenant, "agent:p", permissions=AGENT))
        other = Api(channel, walled_server.mint_key(tenant, "agent:o", permissions=AGENT))
        candidate = (await propose(proposer, "withdrawable egret idea")).id

        def withdraw(api: Api, memory_id: str) -> Awaitable[Any]:
            return api.review.WithdrawCandidate(
                review_pb2.WithdrawCandidateRequest(scope=api.scope(), id=memory_id),
                metadata=api.md,
            )

        baseline = await outcome(withdraw(other, RANDOM_ID))
        assert baseline[0] == grpc.StatusCode.NOT_FOUND
        assert await outcome(withdraw(other, candidate)) == baseline
        done = await outcome(withdraw(proposer, candidate))
        assert done[0] == grpc.StatusCode.OK
        assert (await proposer.get(candidate)).status == common_pb2.MEMORY_STATUS_WITHDRAWN
        assert await hidden_like_random(other, candidate)
