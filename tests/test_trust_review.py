"""Issue 32, review: a reviewer learns nothing about memories it cannot see through the
review queue, a review, a withdrawal or the proposal limits."""

from __future__ import annotations

import grpc

from brain.v1 import common_pb2, review_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .edge import RANDOM_ID, outcome
from .helpers import Api


async def propose(api: Api, content: str, supersedes: list[str] = ()) -> str:  # type: ignore[assignment]
    response = await api.review.ProposeMemory(
        review_pb2.ProposeMemoryRequest(
            scope=api.scope(),
            memory=common_pb2.MemoryDraft(content=content),
            supersedes=list(supersedes),
            reason="it changed",
        ),
        metadata=api.md,
    )
    return str(response.candidate.id)


def decide(api: Api, memory_id: str, *, approve: bool) -> object:
    decision = review_pb2.REVIEW_DECISION_APPROVE if approve else review_pb2.REVIEW_DECISION_REJECT
    return api.review.ReviewCandidate(
        review_pb2.ReviewCandidateRequest(
            scope=api.scope(), id=memory_id, decision=decision, reason="looked at it"
        ),
        metadata=api.md,
    )


async def queue(api: Api) -> list[str]:
    response = await api.review.ListCandidates(
        review_pb2.ListCandidatesRequest(scope=api.scope(), page_size=100), metadata=api.md
    )
    return [c.id for c in response.candidates]


async def test_a_candidate_superseding_what_the_reviewer_cannot_see_is_hidden_from_it(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A candidate that would supersede an hr-only memory is not in a team reviewer's
    queue, and approving or rejecting it answers exactly as a random id (before: the
    approval answered ``supersedes: memory not found``, telling that a hidden memory
    exists). Positive controls: the same reviewer reviews a candidate over a team memory,
    and a reviewer holding hr sees and approves the first one; the proposer still lists
    its own proposal."""
    tenant = unique("t")
    rw = "memories:read,memories:write"

    def key(principal: str, permissions: str, *labels: str) -> Api:
        minted = brain_server.mint_key(tenant, principal, permissions=permissions, labels=labels)
        return Api(channel, minted)

    hr = key("hr", rw, "hr")
    lead = key("lead", rw, "team")
    agent = key("agent", rw + ",memories:propose", "team", "hr")
    team_reviewer = key("rita", "memories:read,memories:review", "team")
    review_only = key("rolf", "memories:review", "team")
    hr_reviewer = key("hugo", "memories:read,memories:review", "team", "hr")

    secret = (await hr.save("Dana's salary review is in March", labels=["hr"])).memory.id
    public = (await lead.save("Standups are at ten")).memory.id
    over_secret = await propose(agent, "Dana's salary review moved to April", [secret])
    over_public = await propose(agent, "Standups are at half past ten", [public])

    listed = await queue(team_reviewer)  # (listing needs memories:read)
    assert over_public in listed  # positive control: the queue is not empty
    assert over_secret not in listed
    for reviewer in (team_reviewer, review_only):
        for approve in (True, False):
            seen = await outcome(decide(reviewer, over_secret, approve=approve))  # type: ignore[arg-type]
            baseline = await outcome(decide(reviewer, RANDOM_ID, approve=approve))  # type: ignore[arg-type]
            assert baseline[0] == grpc.StatusCode.NOT_FOUND
            assert seen == baseline
    assert over_secret in await queue(agent)  # the proposer's own

    approved = await decide(team_reviewer, over_public, approve=True)  # type: ignore[misc]
    assert approved.memory.status == common_pb2.MEMORY_STATUS_ACTIVE
    assert over_secret in await queue(hr_reviewer)
    approved = await decide(hr_reviewer, over_secret, approve=True)  # type: ignore[misc]
    assert approved.memory.status == common_pb2.MEMORY_STATUS_ACTIVE
    assert (await hr.get(secret)).status == common_pb2.MEMORY_STATUS_SUPERSEDED


async def test_the_proposal_budget_counts_proposals_the_key_can_no_longer_see(
    pg_cluster: PgCluster, loop_thread: LoopThread
) -> None:
    """A key's hourly proposal budget counts its proposal that was approved and then
    relabelled away from it (before: it no longer counted, so the budget refilled and the
    count in the message told the key that one of its proposals was hidden). Positive
    control: another key of the tenant still proposes."""
    server = BrainServer(
        cluster=pg_cluster, loop=loop_thread,
        settings=server_settings(pg_cluster, proposals_per_hour=2),
    )  # fmt: skip
    server.start()
    try:
        tenant = unique("t")
        async with grpc.aio.insecure_channel(server.target) as channel:

            def key(principal: str, permissions: str, *labels: str) -> Api:
                minted = server.mint_key(tenant, principal, permissions=permissions,
                                         labels=labels)  # fmt: skip
                return Api(channel, minted)

            agent = key("agent", "memories:read,memories:propose", "team")
            calm = key("calm", "memories:read,memories:propose", "team")
            reviewer = key("rita", "memories:read,memories:review", "team")
            hr = key("hr", "memories:read,memories:write", "team", "hr")
            first = await propose(agent, "the wiki moves to the new host")
            await decide(reviewer, first, approve=True)  # type: ignore[misc]
            await hr.update(first, ["labels"], labels=["hr"])
            assert (await outcome(agent.get(first)))[0] == grpc.StatusCode.NOT_FOUND
            await propose(agent, "the build cache is shared")
            refused = await outcome(propose(agent, "a third idea"))
            assert refused[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "made 2 proposals" in refused[1]
            assert await propose(calm, "a third idea")
    finally:
        server.stop()
