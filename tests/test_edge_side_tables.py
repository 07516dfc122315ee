"""Side tables obey the same walls as rows (issue 11, class 2).

Tombstones, supersede links, dedupe answers, idempotency records and supersede checks
must never tell a caller anything about a memory it cannot read. Every test pairs the
refused or hidden case with a positive control: the key that may see shows it works.
"""

from __future__ import annotations

import uuid
from typing import Any

import grpc

from brain.v1 import common_pb2, memory_pb2, review_pb2

from .conftest import BrainServer, unique
from .helpers import Api, rpc_error
from .test_review import decide

RW = "memories:read,memories:write"
RWF = "memories:read,memories:write,memories:forget"
PROPOSE_ONLY = "memories:propose"
REVIEWER = "memories:read,memories:review"
READ_PROPOSE = "memories:read,memories:propose"
RWP = "memories:read,memories:write,memories:propose"


async def propose(api: Api, content: str, supersedes: list[str] | None = None) -> common_pb2.Memory:
    response = await api.review.ProposeMemory(
        review_pb2.ProposeMemoryRequest(
            scope=api.scope(),
            memory=common_pb2.MemoryDraft(content=content),
            reason="seen in the meeting notes",
            supersedes=supersedes or [],
        ),
        metadata=api.md,
    )
    return response.candidate


async def test_tombstone_binds_only_callers_who_could_see_the_erased_memory(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Forgetting a [secret] memory does not refuse a team-only key's save of the same text."""
    tenant = unique("t")
    lead = Api(channel, brain_server.mint_key(tenant, "lead", permissions=RWF,
                                              labels=("team", "secret")))  # fmt: skip
    team = Api(channel, brain_server.mint_key(tenant, "agent:team", permissions=RWF))
    secret = "The acquisition target is Initech"
    hidden = (await lead.save(secret, labels=["secret"])).memory.id
    await lead.forget(hidden)

    # No oracle: the team key could never read the secret memory, so its tombstone is silent.
    saved = await team.save(secret)
    assert saved.outcome == memory_pb2.SAVE_OUTCOME_CREATED
    # Positive control: the key that saw the secret memory go is still bound by it.
    err = await rpc_error(lead.save(secret, labels=["secret"]))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "tombstone" in (err.details() or "")

    # Once the team's own copy is forgotten, its tombstone binds the team key too, even
    # though the secret tombstone for the same value and bucket came first.
    await team.forget(saved.memory.id)
    err = await rpc_error(team.save(secret))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    err = await rpc_error(team.update((await team.save("Initech is a maybe")).memory.id,
                                      ["content"], content=secret))  # fmt: skip
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    rows = brain_server.sql(
        "SELECT count(*) FROM tombstones t JOIN tenants n USING (tenant_id) "
        "WHERE n.name = $1 AND t.readmitted_at IS NULL",
        tenant,
    )
    assert rows[0][0] == 2  # one per erased memory


async def test_supersede_links_show_only_visible_memories(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """superseded_by / supersedes list only ids the reader can see, on every read path.

    A successor reaches every reader of what it replaces when written, so a link is cut
    only when the successor is relabelled away from a reader later, or when it is wider
    than what it replaced (the second half)."""
    tenant = unique("t")
    admin = Api(channel, brain_server.mint_key(tenant, "admin", permissions=RW,
                                               labels=("team", "secret")))  # fmt: skip
    bob = Api(channel, brain_server.mint_key(tenant, "bob", user="bob"), user_id="bob")
    alice = Api(channel, brain_server.mint_key(tenant, "alice", user="alice"), user_id="alice")
    shared = (await admin.save("Standup is at 9:30")).memory.id
    successor = await admin.save("Standup moved to 10:00", supersedes=[shared])
    assert list((await bob.get(shared)).superseded_by) == [successor.memory.id]  # control
    # Later the successor is relabelled away from bob (and from alice).
    await admin.update(successor.memory.id, ["labels"], labels=["secret"])
    assert list((await alice.get(shared)).superseded_by) == []
    assert list((await admin.get(shared)).superseded_by) == [successor.memory.id]  # control

    seen = await bob.get(shared)
    assert seen.status == common_pb2.MEMORY_STATUS_SUPERSEDED
    assert list(seen.superseded_by) == []
    assert all(list(v.superseded_by) == [] for v in await bob.history(shared))
    exported = [e.memory for e in await bob.export(include_history=True)]
    assert shared in {m.id for m in exported}
    assert all(successor.memory.id not in m.superseded_by for m in exported)
    listed = await bob.list_all(
        filter=common_pb2.MemoryFilter(statuses=[common_pb2.MEMORY_STATUS_SUPERSEDED])
    )
    assert [list(m.superseded_by) for m in listed if m.id == shared] == [[]]
    assert successor.memory.id in {m.id for m in await admin.list_all(
        filter=common_pb2.MemoryFilter(statuses=[common_pb2.MEMORY_STATUS_ACTIVE]))}  # fmt: skip

    # The other direction, by label: a team row that supersedes a [secret] one.
    old = (await admin.save("Budget is 2M", labels=["secret"])).memory.id
    new = (
        await admin.save("Budget is public now", supersedes=[old], labels=["secret", "team"])
    ).memory.id
    assert list((await admin.get(new)).supersedes) == [old]  # control
    assert list((await bob.get(new)).supersedes) == []
    hits = await bob.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(scope=bob.scope(), query="budget public", limit=5),
        metadata=bob.md,
    )
    assert [list(h.memory.supersedes) for h in hits.hits if h.memory.id == new] == [[]]
    # Write responses are cut the same way.
    teammate = Api(channel, brain_server.mint_key(tenant, "teammate"))
    updated = await teammate.update(new, ["importance"], importance=0.9)
    assert (updated.version, list(updated.supersedes)) == (2, [])
    assert list((await admin.get(new)).supersedes) == [old]


async def test_keys_without_read_never_get_an_existing_row_back(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Proposing or saving an existing memory's exact text without memories:read stores it
    anew instead of answering with the existing row's content, tags and metadata."""
    tenant = unique("t")
    writer = Api(channel, brain_server.mint_key(tenant, "writer", permissions=RW))
    blind = Api(channel, brain_server.mint_key(tenant, "agent:blind", permissions=PROPOSE_ONLY))
    reader_key = brain_server.mint_key(tenant, "agent:reader", permissions=READ_PROPOSE)
    reader = Api(channel, reader_key)
    write_only = Api(
        channel, brain_server.mint_key(tenant, "agent:wo", permissions="memories:write")
    )
    text = "The staging database password rotates on Mondays"
    existing = (await writer.save(text, tags=["ops"], metadata={"source": "runbook"})).memory

    candidate = await propose(blind, text)
    assert candidate.id != existing.id
    assert candidate.status == common_pb2.MEMORY_STATUS_CANDIDATE
    assert (candidate.created_by, list(candidate.tags), dict(candidate.metadata)) == (
        "agent:blind", [], {},
    )  # fmt: skip
    # Its own pending proposal is the one duplicate it may be answered with.
    assert (await propose(blind, text)).id == candidate.id
    # Positive control: a proposer that can read is answered with the existing row.
    assert (await propose(reader, text)).id == existing.id

    saved = await write_only.save(text)
    assert saved.outcome == memory_pb2.SAVE_OUTCOME_CREATED
    assert saved.memory.id != existing.id and dict(saved.memory.metadata) == {}
    again = await writer.save(text)  # control: a reader is deduplicated
    assert again.outcome == memory_pb2.SAVE_OUTCOME_DEDUPLICATED


async def test_supersede_of_invisible_and_random_ids_answers_byte_identically(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Save, Propose and approval naming an invisible id answer exactly like a random id."""
    tenant = unique("t")
    lead = Api(channel, brain_server.mint_key(
        tenant, "lead", permissions="memories:read,memories:write,memories:propose",
        labels=("team", "secret")))  # fmt: skip
    team = Api(channel, brain_server.mint_key(tenant, "agent:team", permissions=RWP))
    reviewer = Api(channel, brain_server.mint_key(tenant, "carol", permissions=REVIEWER))
    stranger = Api(channel, brain_server.mint_key(unique("t"), "mallory"))
    secret = (await lead.save("Layoffs planned for Q3", labels=["secret"])).memory.id
    foreign = (await stranger.save("Another tenant's note")).memory.id
    mine = (await team.save("Team note")).memory.id

    async def errors(target: str) -> list[tuple[grpc.StatusCode, str]]:
        out = []
        for call in (team.save("Replacement", supersedes=[target]),
                     propose(team, "Proposed replacement", supersedes=[target])):  # fmt: skip
            err = await rpc_error(call)
            out.append((err.code(), err.details() or ""))
        return out

    random_errors = await errors(str(uuid.uuid4()))
    assert random_errors[0][0] == grpc.StatusCode.NOT_FOUND
    assert await errors(secret) == random_errors
    assert await errors(foreign) == random_errors
    # Positive control: a visible target is superseded / proposed for superseding.
    revised = await propose(team, "Team note, revised", supersedes=[mine])
    assert revised.supersedes == [mine]
    memo = (await team.save("Team memo")).memory.id
    assert (await team.save("Team memo, revised", supersedes=[memo])).memory.supersedes == [memo]

    # A candidate whose target the reviewer cannot see is not in its queue, and reviewing
    # it answers exactly like a random id (issue 32: the approval would tell the target
    # exists).
    candidate = await propose(lead, "Layoffs cancelled", supersedes=[secret])
    listed = await reviewer.review.ListCandidates(
        review_pb2.ListCandidatesRequest(scope=reviewer.scope()), metadata=reviewer.md
    )
    assert candidate.id not in [c.id for c in listed.candidates]
    assert revised.id in [c.id for c in listed.candidates]  # positive control

    def review_call(memory_id: str) -> Any:
        return reviewer.review.ReviewCandidate(
            review_pb2.ReviewCandidateRequest(
                scope=reviewer.scope(), id=memory_id, reason="ok",
                decision=review_pb2.REVIEW_DECISION_APPROVE),
            metadata=reviewer.md)  # fmt: skip

    hidden = await rpc_error(review_call(candidate.id))
    missing = await rpc_error(review_call(str(uuid.uuid4())))
    assert (hidden.code(), hidden.details()) == (missing.code(), missing.details())
    assert hidden.code() == grpc.StatusCode.NOT_FOUND
    assert (await lead.get(secret)).status == common_pb2.MEMORY_STATUS_ACTIVE
    # Positive control: the same approval of a candidate with a visible target goes through.
    approved = await decide(reviewer, revised.id, approve=True)
    assert approved.status == common_pb2.MEMORY_STATUS_ACTIVE
    assert (await team.get(mine)).status == common_pb2.MEMORY_STATUS_SUPERSEDED


async def test_idempotency_keys_are_per_key(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The same idempotency key from two keys never replays or refuses across them."""
    tenant = unique("t")
    alice = Api(channel, brain_server.mint_key(tenant, "alice", user="alice"), user_id="alice")
    bob = Api(channel, brain_server.mint_key(tenant, "bob", user="bob"), user_id="bob")
    first = await alice.save("Alice's plan", idempotency_key="k-1")
    theirs = await bob.save("Bob's plan", idempotency_key="k-1")
    assert theirs.outcome == memory_pb2.SAVE_OUTCOME_CREATED
    assert theirs.memory.id != first.memory.id and theirs.memory.content == "Bob's plan"
    replay = await alice.save("Alice's plan", idempotency_key="k-1")  # control
    assert (replay.outcome, replay.memory.id) == (memory_pb2.SAVE_OUTCOME_REPLAYED, first.memory.id)


async def test_write_responses_to_keys_without_read_are_receipts(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """UpdateMemory by a key without memories:read answers where and what state the memory
    is in, never the content, tags or metadata it did not set."""
    tenant = unique("t")
    writer = Api(channel, brain_server.mint_key(tenant, "writer", permissions=RW))
    blind = Api(channel, brain_server.mint_key(tenant, "agent:wo", permissions="memories:write"))
    memory_id = (
        await writer.save("The vault combination is 12-34-56", tags=["ops"], metadata={"k": "v"})
    ).memory.id
    updated = await blind.update(memory_id, ["importance"], importance=0.8)
    assert (updated.id, updated.version, updated.status) == (
        memory_id, 2, common_pb2.MEMORY_STATUS_ACTIVE,
    )  # fmt: skip
    assert (updated.content, list(updated.tags), dict(updated.metadata)) == ("", [], {})
    control = await writer.update(memory_id, ["importance"], importance=0.7)
    assert (control.content, list(control.tags)) == ("The vault combination is 12-34-56", ["ops"])

    # A reviewer without memories:read approving by id gets a receipt too.
    proposer = Api(channel, brain_server.mint_key(tenant, "agent:p", permissions=READ_PROPOSE))
    judge = Api(channel, brain_server.mint_key(tenant, "judge", permissions="memories:review"))
    candidate = await propose(proposer, "The vault moved to room 4")
    approved = await judge.review.ReviewCandidate(
        review_pb2.ReviewCandidateRequest(
            scope=judge.scope(), id=candidate.id, reason="confirmed",
            decision=review_pb2.REVIEW_DECISION_APPROVE,
        ),
        metadata=judge.md,
    )  # fmt: skip
    assert (approved.memory.id, approved.memory.status) == (
        candidate.id, common_pb2.MEMORY_STATUS_ACTIVE,
    )  # fmt: skip
    assert (approved.memory.content, approved.memory.proposal_reason) == ("", "")
    assert (await proposer.get(candidate.id)).content == "The vault moved to room 4"  # control
