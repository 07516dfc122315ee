"""A successor reaches every reader of what it supersedes.

Before, a writer holding labels team and hr could supersede a team memory with an hr-only
one: team readers then saw their memory retired, by whom and at the successor's exact
transaction time, by a memory they cannot see. A user-confined key's approved proposal
likewise retired a team memory in favour of one only that user could read. Now a
successor's bucket is at least as wide as each target's and it keeps every label of
theirs; unnamed labels are the targets' own, and a proposal is placed in its targets'
bucket, so the team reads the approved value."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from brain.v1 import common_pb2

from .conftest import BrainServer, unique
from .helpers import Api, rpc_error
from .test_trust_review import decide, propose

RW = "memories:read,memories:write"
REVIEWS = "memories:read,memories:review"
ACTIVE, SUPERSEDED = common_pb2.MEMORY_STATUS_ACTIVE, common_pb2.MEMORY_STATUS_SUPERSEDED


def keys(brain_server: BrainServer, channel: grpc.aio.Channel) -> Callable[..., Api]:
    """Minting for one fresh tenant: key(principal, *labels, permissions=, user=)."""
    tenant = unique("t")

    def key(principal: str, *labels: str, permissions: str = RW, user: str = "") -> Api:
        minted = brain_server.mint_key(tenant, principal, permissions=permissions,
                                       labels=labels or ("team",), user=user or None)  # fmt: skip
        return Api(channel, minted, user_id=user)

    return key


def rows_with(brain_server: BrainServer, content: str) -> int:
    return int(brain_server.sql(f"SELECT count(*) FROM memories WHERE content = '{content}'")[0][0])


async def test_a_successor_keeps_every_label_of_what_it_replaces(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The leak: an hr-only successor of a team memory is refused and writes nothing; the
    team reader's view is unchanged. Positive controls: the same supersede with labels
    left unnamed (they are the target's) or widened is seen by the team reader."""
    key = keys(brain_server, channel)
    writer, team = key("writer", "team", "hr"), key("reader", "team")
    old = (await writer.save("The offsite is in Lisbon", labels=["team"])).memory.id

    err = await rpc_error(
        writer.save("The offsite moved to Porto", supersedes=[old], labels=["hr"])
    )
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert (err.details() or "").startswith("memory.labels:")
    assert rows_with(brain_server, "The offsite moved to Porto") == 0
    seen = await team.get(old)
    assert (seen.status, seen.version, list(seen.superseded_by)) == (ACTIVE, 1, [])

    new = (await writer.save("The offsite moved to Porto", supersedes=[old])).memory
    assert list(new.labels) == ["team"]  # the target's, not the key's
    seen = await team.get(old)
    assert (seen.status, list(seen.superseded_by)) == (SUPERSEDED, [new.id])
    assert (await team.get(new.id)).content == "The offsite moved to Porto"

    wider = (
        await writer.save("The offsite is in Faro", supersedes=[new.id], labels=["hr", "team"])
    ).memory
    assert list((await team.get(new.id)).superseded_by) == [wider.id]
    assert list((await key("hr-only", "hr").get(wider.id)).supersedes) == []  # cut for hr


async def test_a_successor_may_keep_a_label_its_key_does_not_hold(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A team-only key supersedes a memory labelled team and hr: the successor keeps hr
    (keeping is no grant, as in a relabel), so hr-only readers see it; naming only team is
    refused, and naming a label held by neither is still no grant."""
    key = keys(brain_server, channel)
    both, team, hr = key("both", "team", "hr"), key("team"), key("hr", "hr")
    old = (await both.save("Payroll runs on the 25th", labels=["team", "hr"])).memory.id

    narrowed = await rpc_error(team.save("Payroll runs on the 24th", supersedes=[old],
                                         labels=["team"]))  # fmt: skip
    assert narrowed.code() == grpc.StatusCode.FAILED_PRECONDITION
    granted = await rpc_error(team.save("Payroll runs on the 24th", supersedes=[old],
                                        labels=["team", "hr", "board"]))  # fmt: skip
    assert granted.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "board" in (granted.details() or "")
    assert rows_with(brain_server, "Payroll runs on the 24th") == 0
    assert (await hr.get(old)).status == ACTIVE

    new = (await team.save("Payroll runs on the 24th", supersedes=[old])).memory
    assert sorted(new.labels) == ["hr", "team"]
    assert (await hr.get(new.id)).content == "Payroll runs on the 24th"
    assert list((await hr.get(old)).superseded_by) == [new.id]


async def test_a_successor_is_saved_in_a_bucket_as_wide_as_its_targets(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """An unconfined key superseding a team memory from alice's bucket is refused: bob
    would have lost the team's value to one only alice reads. Positive control: the same
    key and value in the team's bucket, which bob reads."""
    key = keys(brain_server, channel)
    admin, bob = key("admin"), key("bob", user="bob")
    shared = (await admin.save("Standup is at 9:30")).memory.id

    err = await rpc_error(admin.save("Standup is at 10:00", supersedes=[shared],
                                     scope=admin.scope(user_id="alice")))  # fmt: skip
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert (err.details() or "").startswith("supersedes:")
    assert rows_with(brain_server, "Standup is at 10:00") == 0
    assert (await bob.get(shared)).status == ACTIVE

    new = (await admin.save("Standup is at 10:00", supersedes=[shared])).memory.id
    assert (await bob.get(new)).content == "Standup is at 10:00"
    assert list((await bob.get(shared)).superseded_by) == [new]


async def test_a_proposal_is_placed_where_what_it_supersedes_is(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Alice (confined to her user) proposes a change to a team memory: the candidate is
    placed in the team's bucket, so once approved bob reads the new value. Her proposal
    over her own memory stays in her bucket (control: bob never sees it)."""
    key = keys(brain_server, channel)
    admin, bob, reviewer = key("admin"), key("bob", user="bob"), key("rita", permissions=REVIEWS)
    alice = key("alice", permissions=RW + ",memories:propose", user="alice")
    shared = (await admin.save("The API style guide lives in docs/api.md")).memory.id
    own = (await alice.save("Alice reviews on Tuesdays")).memory.id

    over_shared = await propose(alice, "The API style guide moved to the wiki", [shared])
    over_own = await propose(alice, "Alice reviews on Thursdays", [own])
    assert (await alice.get(over_shared)).status == common_pb2.MEMORY_STATUS_CANDIDATE
    placed = brain_server.sql(
        "SELECT memory_id::text, user_id FROM memories WHERE memory_id = ANY("
        f"ARRAY['{over_shared}', '{over_own}']::uuid[]) AND retired_at IS NULL"
    )
    assert dict(placed) == {over_shared: "", over_own: "alice"}

    for candidate in (over_shared, over_own):
        approved = await decide(reviewer, candidate, approve=True)  # type: ignore[misc]
        assert approved.memory.status == ACTIVE
    assert (await bob.get(over_shared)).content == "The API style guide moved to the wiki"
    assert list((await bob.get(shared)).superseded_by) == [over_shared]
    assert over_shared in await bob.search("style guide wiki")
    assert (await rpc_error(bob.get(over_own))).code() == grpc.StatusCode.NOT_FOUND
    assert (await alice.get(over_own)).status == ACTIVE


async def test_unnamed_labels_of_a_proposal_are_its_targets_not_the_keys(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """An agent holding team and hr proposes a change to an hr-only memory without naming
    labels: the candidate is hr-only, so once approved the team still cannot read it
    (before, it took the key's default label, team, and the approval published it).
    Positive control: an hr reader reads the approved value."""
    key = keys(brain_server, channel)
    hr, team = key("hr", "hr"), key("lead")
    agent = key("agent", "team", "hr", permissions=RW + ",memories:propose")
    hr_reviewer = key("hugo", "team", "hr", permissions=REVIEWS)
    secret = (await hr.save("Dana's salary review is in March", labels=["hr"])).memory.id
    public = (await team.save("Standups are at ten")).memory.id

    over_secret = await propose(agent, "Dana's salary review moved to April", [secret])
    over_public = await propose(agent, "Standups are at half past ten", [public])
    for candidate in (over_secret, over_public):
        await decide(hr_reviewer, candidate, approve=True)
    assert (await hr.get(over_secret)).content == "Dana's salary review moved to April"
    assert list((await hr.get(over_secret)).labels) == ["hr"]
    assert (await rpc_error(team.get(over_secret))).code() == grpc.StatusCode.NOT_FOUND
    assert (await team.get(over_public)).content == "Standups are at half past ten"


async def test_approval_refuses_a_candidate_whose_target_widened_since(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A target relabelled wider after the proposal: approving would leave its new
    readers seeing it retired by a memory they cannot read, so the approval is refused
    and changes nothing. Positive control: the same reviewer approves a proposal over a
    target that did not change."""
    key = keys(brain_server, channel)
    admin, reviewer = key("admin", "team", "hr"), key("rita", "team", "hr", permissions=REVIEWS)
    agent = key("agent", permissions="memories:read,memories:propose")
    widened = (await admin.save("The release train leaves on Monday")).memory.id
    kept = (await admin.save("The retro is on Friday")).memory.id
    late = await propose(agent, "The release train leaves on Tuesday", [widened])
    fine = await propose(agent, "The retro is on Thursday", [kept])
    await admin.update(widened, ["labels"], labels=["team", "hr"])

    err = await rpc_error(decide(reviewer, late, approve=True))  # type: ignore[arg-type]
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no longer reaches every reader" in (err.details() or "")
    assert (await admin.get(widened)).status == ACTIVE
    assert (await reviewer.get(late)).status == common_pb2.MEMORY_STATUS_CANDIDATE

    approved = await decide(reviewer, fine, approve=True)  # type: ignore[misc]
    assert approved.memory.status == ACTIVE
    assert (await admin.get(kept)).status == SUPERSEDED
    rejected = await decide(reviewer, late, approve=False)  # type: ignore[misc]
    assert rejected.memory.status == common_pb2.MEMORY_STATUS_REJECTED  # it can still be rejected


async def test_a_relabel_keeps_a_label_of_the_key(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A team-only key's successor keeps a target's secret label; dropping team from it
    would leave a memory the key cannot reach: PERMISSION_DENIED naming patch.labels (it
    was INTERNAL, row-level security refusing the row), nothing written. Positive control:
    a key holding secret makes the same relabel."""
    key = keys(brain_server, channel)
    boss, team = key("boss", "team", "secret"), key("teamw")
    target = (await boss.save("Board minutes are in vault 7", labels=["team", "secret"])).memory
    successor = (await team.save("Board minutes are in vault 9", supersedes=[target.id])).memory
    assert sorted(successor.labels) == ["secret", "team"]

    err = await rpc_error(team.update(successor.id, ["labels"], labels=["secret"]))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert (err.details() or "").startswith("patch.labels:")
    assert (await team.get(successor.id)).version == 1
    assert (await boss.update(successor.id, ["labels"], labels=["secret"])).version == 2
    assert (await rpc_error(team.get(successor.id))).code() == grpc.StatusCode.NOT_FOUND


async def test_a_proposal_that_supersedes_is_not_swallowed_by_a_duplicate(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Proposing a value some active memory already holds, to supersede another memory,
    is a new candidate (before: the active memory came back and the supersede was lost).
    Positive control: the same proposal again is its duplicate."""
    key = keys(brain_server, channel)
    admin, reviewer = key("admin"), key("rita", permissions=REVIEWS)
    agent = key("agent", permissions=RW + ",memories:propose")
    holder = (await admin.save("Deploys freeze on Fridays")).memory.id
    stale = (await admin.save("Deploys freeze on Thursdays")).memory.id

    first = await propose(agent, "Deploys freeze on Fridays", [stale])
    assert first != holder
    assert await propose(agent, "Deploys freeze on Fridays", [stale]) == first
    await decide(reviewer, first, approve=True)
    assert list((await admin.get(stale)).superseded_by) == [first]
