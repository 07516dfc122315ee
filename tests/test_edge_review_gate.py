"""Review-required gates every content change (issue 11, class 5).

In a review-required namespace a key without memories:review cannot change what the
brain believes directly: SaveMemory (also with supersedes) becomes a candidate, and
UpdateMemory is refused with FAILED_PRECONDITION pointing at ProposeMemory. Forget is
erasure, not a belief change: it needs memories:forget and write power, not review.
"""

from __future__ import annotations

import uuid

import grpc

from brain.v1 import common_pb2, memory_pb2

from .conftest import BrainServer, unique
from .helpers import Api, rpc_error

WRITER = "memories:read,memories:write,memories:forget"
LEAD = "memories:read,memories:write,memories:review"


def set_review_required(server: BrainServer, tenant: str, namespace: str) -> None:
    server.admin("namespaces", "set", namespace, "--tenant", tenant, "--review-required")


async def test_update_in_review_required_namespace_is_refused_for_non_reviewers(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A writer's UpdateMemory of any field is FAILED_PRECONDITION and writes nothing; a
    reviewer's update, and the writer's in an ordinary namespace, go through."""
    tenant = unique("t")
    writer = Api(channel, brain_server.mint_key(tenant, "agent:writer", permissions=WRITER))
    lead = Api(channel, brain_server.mint_key(tenant, "lead", permissions=LEAD))
    gated = (await lead.save("Deploys need two approvals")).memory.id
    free = (await writer.save("Lunch is at noon", scope=writer.scope(namespace="free"))).memory.id
    set_review_required(brain_server, tenant, "proj")

    for paths, patch in (
        (["content"], {"content": "Deploys need no approval"}),
        (["importance"], {"importance": 0.1}),
        (["labels"], {"labels": ["team"]}),
        (["expires_at"], {}),
    ):
        err = await rpc_error(writer.update(gated, paths, **patch))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, paths
        assert "review-required" in (err.details() or "")
        assert "ProposeMemory" in (err.details() or "")
    versions = await lead.history(gated)
    assert [(v.version, v.content) for v in versions] == [(1, "Deploys need two approvals")]

    # Positive controls: a reviewer updates directly; the writer does outside the policy.
    updated = await lead.update(gated, ["content"], content="Deploys need three approvals")
    assert (updated.version, updated.status) == (2, common_pb2.MEMORY_STATUS_ACTIVE)
    free_writer = Api(channel, writer.key, namespace="free")
    assert (await free_writer.update(free, ["content"], content="Lunch is at one")).version == 2

    # The policy never answers for an id the writer cannot see: NOT_FOUND like a random id.
    hidden_key = brain_server.mint_key(tenant, "hr", permissions=LEAD, labels=("hr",))
    hidden = (await Api(channel, hidden_key).save("Salary bands", labels=["hr"])).memory.id
    missing = await rpc_error(writer.update(str(uuid.uuid4()), ["importance"], importance=0.2))
    invisible = await rpc_error(writer.update(hidden, ["importance"], importance=0.2))
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    assert (invisible.code(), invisible.details()) == (missing.code(), missing.details())


async def test_supersede_in_review_required_namespace_becomes_a_candidate(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """SaveMemory(supersedes) by a writer proposes; the target stays active until approval."""
    tenant = unique("t")
    writer = Api(channel, brain_server.mint_key(tenant, "agent:writer", permissions=WRITER))
    lead = Api(channel, brain_server.mint_key(tenant, "lead", permissions=LEAD))
    old = (await lead.save("The on-call rota is weekly")).memory.id
    set_review_required(brain_server, tenant, "proj")

    proposed = await writer.save("The on-call rota is fortnightly", supersedes=[old])
    assert proposed.outcome == memory_pb2.SAVE_OUTCOME_PROPOSED
    assert proposed.memory.status == common_pb2.MEMORY_STATUS_CANDIDATE
    assert list(proposed.memory.supersedes) == [old]
    assert (await lead.get(old)).status == common_pb2.MEMORY_STATUS_ACTIVE
    # Control: the reviewer's own supersede is direct.
    direct = await lead.save("The on-call rota is monthly", supersedes=[old])
    assert direct.outcome == memory_pb2.SAVE_OUTCOME_CREATED
    assert (await lead.get(old)).status == common_pb2.MEMORY_STATUS_SUPERSEDED


async def test_forget_is_erasure_and_not_gated_by_review(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A key with memories:forget erases directly in a review-required namespace; without
    memories:forget it cannot, whatever the policy."""
    tenant = unique("t")
    writer = Api(channel, brain_server.mint_key(tenant, "agent:writer", permissions=WRITER))
    lead = Api(channel, brain_server.mint_key(tenant, "lead", permissions=LEAD))
    target = (await lead.save("Customer X's phone number is 555-0100")).memory.id
    set_review_required(brain_server, tenant, "proj")
    err = await rpc_error(lead.forget(target))  # no memories:forget
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    forgotten = await writer.forget(target)
    assert forgotten.tombstone_id
    assert (await lead.get(target)).status == common_pb2.MEMORY_STATUS_RETRACTED
