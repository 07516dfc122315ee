"""Human review: candidates, separation of duties, rejection tombstones, review policy."""

from __future__ import annotations

import grpc
from google.protobuf.duration_pb2 import Duration

from brain.v1 import common_pb2, memory_pb2, review_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api, rpc_error

FULL = "memories:read,memories:write,memories:propose,memories:review,memories:forget,audit:read"
AGENT = "memories:read,memories:propose"
REVIEWER = "memories:read,memories:review"
CANDIDATE = common_pb2.MEMORY_STATUS_CANDIDATE


async def propose(
    api: Api, content: str, reason: str = "the user said so", **kw: object
) -> common_pb2.Memory:
    response = await api.review.ProposeMemory(
        review_pb2.ProposeMemoryRequest(
            scope=api.scope(), memory=common_pb2.MemoryDraft(content=content), reason=reason, **kw
        ),
        metadata=api.md,
    )
    return response.candidate


async def decide(
    api: Api, memory_id: str, approve: bool, reason: str = "checked"
) -> common_pb2.Memory:
    decision = review_pb2.REVIEW_DECISION_APPROVE if approve else review_pb2.REVIEW_DECISION_REJECT
    response = await api.review.ReviewCandidate(
        review_pb2.ReviewCandidateRequest(
            scope=api.scope(), id=memory_id, decision=decision, reason=reason
        ),
        metadata=api.md,
    )
    return response.memory


async def candidates(api: Api, **kw: object) -> list[str]:
    response = await api.review.ListCandidates(
        review_pb2.ListCandidatesRequest(scope=api.scope(), **kw), metadata=api.md
    )
    return [m.id for m in response.candidates]


async def test_self_approval_refused_second_reviewer_approves(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A full-permission key cannot approve its own proposal; another reviewer can."""
    tenant = unique("t")
    boss = Api(channel, brain_server.mint_key(tenant, "agent:boss", permissions=FULL))
    reviewer = Api(channel, brain_server.mint_key(tenant, "carol", permissions=REVIEWER))
    candidate = await propose(boss, "The release train leaves every second Monday")
    assert candidate.status == common_pb2.MEMORY_STATUS_CANDIDATE
    assert candidate.proposal_reason == "the user said so"
    assert await boss.search("release train") == []

    err = await rpc_error(decide(boss, candidate.id, approve=True))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "proposed" in (err.details() or "")
    assert (await boss.get(candidate.id)).status == common_pb2.MEMORY_STATUS_CANDIDATE

    approved = await decide(reviewer, candidate.id, approve=True, reason="matches the calendar")
    assert approved.status == common_pb2.MEMORY_STATUS_ACTIVE
    assert (approved.reviewed_by, approved.review_reason) == ("carol", "matches the calendar")
    assert await boss.search("release train") == [candidate.id]
    assert await reviewer.search("release train") == [candidate.id]


async def test_rejected_value_cannot_be_proposed_again(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Rejecting leaves a tombstone: the same value is refused, another value is accepted."""
    tenant = unique("t")
    agent = Api(channel, brain_server.mint_key(tenant, "agent:coder", permissions=AGENT))
    reviewer = Api(channel, brain_server.mint_key(tenant, "carol", permissions=REVIEWER))
    candidate = await propose(agent, "Passwords may be stored in the wiki")
    rejected = await decide(reviewer, candidate.id, approve=False, reason="against policy")
    assert rejected.status == common_pb2.MEMORY_STATUS_REJECTED
    err = await rpc_error(propose(agent, "passwords may be stored  in the WIKI"))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "tombstone" in (err.details() or "")
    other = await propose(agent, "Passwords live in the vault")
    assert other.status == common_pb2.MEMORY_STATUS_CANDIDATE

    listed = brain_server.admin("tombstones", "list", "--tenant", tenant, "--json").stdout
    assert candidate.id in listed
    import json

    tombstone = json.loads(listed)[0]["tombstone_id"]
    brain_server.admin("tombstones", "readmit", str(tombstone), "--tenant", tenant)
    again = await propose(agent, "Passwords may be stored in the wiki")
    assert again.status == common_pb2.MEMORY_STATUS_CANDIDATE


async def test_candidates_are_recalled_only_for_proposer_and_reviewers(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Search skips candidates unless asked; asked, a proposer finds its own, a reviewer all,
    any other key none."""
    tenant = unique("t")
    agent = Api(channel, brain_server.mint_key(tenant, "agent:coder", permissions=AGENT))
    other = Api(channel, brain_server.mint_key(tenant, "agent:other", permissions=AGENT))
    reviewer = Api(channel, brain_server.mint_key(tenant, "carol", permissions=REVIEWER))
    candidate = await propose(agent, "The CI cache lives in bucket ci-cache-eu")
    own = await propose(other, "The CI cache of other lives in bucket ci-cache-us")
    wanted = common_pb2.MemoryFilter(statuses=[common_pb2.MEMORY_STATUS_CANDIDATE])
    assert await agent.search("CI cache", filter=wanted) == [candidate.id]
    assert await other.search("CI cache", filter=wanted) == [own.id]
    assert sorted(await reviewer.search("CI cache", filter=wanted)) == sorted(
        [candidate.id, own.id]
    )
    assert await reviewer.search("CI cache") == []
    # Positive control: once approved, the same unfiltered search recalls it.
    await decide(reviewer, candidate.id, approve=True)
    assert await reviewer.search("CI cache") == [candidate.id]


async def test_list_withdraw_and_expiry(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Proposers list and withdraw only their own candidates; expired ones cannot be reviewed."""
    tenant = unique("t")
    coder = Api(channel, brain_server.mint_key(tenant, "agent:coder", permissions=AGENT))
    writer = Api(channel, brain_server.mint_key(tenant, "agent:writer", permissions=AGENT))
    reviewer = Api(channel, brain_server.mint_key(tenant, "carol", permissions=REVIEWER))
    mine = await propose(coder, "Lint with ruff")
    theirs = await propose(writer, "Docs use British spelling")
    stale = await propose(writer, "Old idea", review_within=Duration(seconds=3600))
    assert sorted(await candidates(reviewer)) == sorted([mine.id, theirs.id, stale.id])
    assert await candidates(coder) == [mine.id]
    err = await rpc_error(candidates(coder, proposed_by="agent:writer"))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert await candidates(coder, proposed_by="agent:coder") == [mine.id]

    err = await rpc_error(
        coder.review.WithdrawCandidate(
            review_pb2.WithdrawCandidateRequest(scope=coder.scope(), id=theirs.id),
            metadata=coder.md,
        )
    )
    # Another proposer's candidate is invisible to a key without memories:review.
    assert err.code() == grpc.StatusCode.NOT_FOUND
    withdrawn = await coder.review.WithdrawCandidate(
        review_pb2.WithdrawCandidateRequest(scope=coder.scope(), id=mine.id), metadata=coder.md
    )
    assert withdrawn.memory.status == common_pb2.MEMORY_STATUS_WITHDRAWN

    brain_server.sql(
        "UPDATE memories SET candidate_expires_at = now() - interval '1 second' "
        "WHERE memory_id = $1::uuid",
        stale.id,
    )
    err = await rpc_error(decide(reviewer, stale.id, approve=True))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "expired" in (err.details() or "")
    assert await candidates(reviewer) == [theirs.id]
    assert (
        await decide(reviewer, theirs.id, approve=True)
    ).status == common_pb2.MEMORY_STATUS_ACTIVE


async def test_review_required_namespace_turns_saves_into_candidates(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """In a review-required namespace a writer's save becomes a candidate; a reviewer's does not."""
    tenant = unique("t")
    writer = Api(channel, brain_server.mint_key(tenant, "agent:writer"), namespace="policy")
    lead = Api(
        channel,
        brain_server.mint_key(
            tenant, "lead", permissions="memories:read,memories:write,memories:review"
        ),
        namespace="policy",
    )
    before = await writer.save("Before the policy: direct")
    assert before.outcome == memory_pb2.SAVE_OUTCOME_CREATED
    brain_server.admin("namespaces", "set", "policy", "--tenant", tenant, "--review-required")
    saved = await writer.save("Code review needs two approvals")
    assert saved.outcome == memory_pb2.SAVE_OUTCOME_PROPOSED
    assert saved.memory.status == common_pb2.MEMORY_STATUS_CANDIDATE
    assert saved.memory.id not in await writer.search("code review two approvals")
    direct = await lead.save("Code freeze starts Friday")
    assert direct.outcome == memory_pb2.SAVE_OUTCOME_CREATED
    await decide(lead, saved.memory.id, approve=True)
    assert (await writer.search("code review two approvals"))[0] == saved.memory.id


async def test_candidate_limits(brain_server: BrainServer, channel: grpc.aio.Channel) -> None:
    """Pending candidates per namespace are capped; the cap answers RESOURCE_EXHAUSTED."""
    tenant = unique("t")
    agent = Api(channel, brain_server.mint_key(tenant, "agent:coder", permissions=AGENT))
    brain_server.admin("namespaces", "set", "proj", "--tenant", tenant, "--max-pending", "2")
    await propose(agent, "one")
    await propose(agent, "two")
    err = await rpc_error(propose(agent, "three"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "proj" in (err.details() or "")
    err = await rpc_error(propose(agent, "four", reason=""))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_candidate_cap_counts_candidates_the_proposer_cannot_see(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The namespace cap counts every pending candidate, also other proposers' (which the
    proposer cannot see); another namespace's and another tenant's candidates do not count."""
    tenant, other_tenant = unique("t"), unique("t")
    first = Api(channel, brain_server.mint_key(tenant, "agent:first", permissions=AGENT))
    second = Api(channel, brain_server.mint_key(tenant, "agent:second", permissions=AGENT))
    elsewhere = Api(channel, brain_server.mint_key(other_tenant, "agent:x", permissions=AGENT))
    brain_server.admin("namespaces", "set", "proj", "--tenant", tenant, "--max-pending", "2")
    brain_server.admin("namespaces", "set", "proj", "--tenant", other_tenant, "--max-pending", "2")
    await propose(elsewhere, "other tenant one")
    await propose(elsewhere, "other tenant two")
    await propose(first, "first idea")
    # Positive control: the second proposer is below the cap with one candidate pending.
    await propose(second, "second idea")
    # The proposer sees only its own candidate, yet the other one counts.
    assert len(await candidates(second)) == 1
    err = await rpc_error(propose(second, "third idea"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    err = await rpc_error(propose(first, "fourth idea"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_the_candidate_cap_counts_hidden_candidates_only_to_a_grain(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Proposing until refused used to count other proposers' hidden candidates exactly
    (room = cap - own). With a cap of 33 (a grain of 2) and one hidden candidate, the 32nd
    proposal is refused though the exact count would take it; the 31st lands (control), and
    so does the other proposer's own (control)."""
    tenant = unique("t")
    mine = Api(channel, brain_server.mint_key(tenant, "agent:mine", permissions=AGENT))
    other = Api(channel, brain_server.mint_key(tenant, "agent:other", permissions=AGENT))
    brain_server.admin("namespaces", "set", "proj", "--tenant", tenant, "--max-pending", "33")
    assert (await propose(other, "the other agent's idea")).status == CANDIDATE  # control
    for i in range(31):
        assert (await propose(mine, f"my idea number {i}")).status == CANDIDATE
    assert len(await candidates(mine)) == 31  # mine sees only its own
    err = await rpc_error(propose(mine, "my idea number 31"))  # exactly: 31 + 1 + 1 <= 33
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "proj" in (err.details() or "") and "at most 33" in (err.details() or "")


async def test_proposals_per_key_per_hour(pg_cluster: PgCluster, loop_thread: LoopThread) -> None:
    """A key that spent its hourly proposal budget gets RESOURCE_EXHAUSTED; another key does not."""
    server = BrainServer(
        cluster=pg_cluster,
        loop=loop_thread,
        settings=server_settings(pg_cluster, proposals_per_hour=2),
    )
    server.start()
    try:
        tenant = unique("t")
        async with grpc.aio.insecure_channel(server.target) as channel:
            busy = Api(channel, server.mint_key(tenant, "agent:busy", permissions=AGENT))
            calm = Api(channel, server.mint_key(tenant, "agent:calm", permissions=AGENT))
            await propose(busy, "first idea")
            await propose(busy, "second idea")
            err = await rpc_error(propose(busy, "third idea"))
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "last hour" in (err.details() or "")
            assert (await propose(calm, "third idea")).status == common_pb2.MEMORY_STATUS_CANDIDATE
    finally:
        server.stop()
