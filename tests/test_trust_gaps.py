"""Issue 32: no count of hidden activity (audit chain fields, sealed cursors) and no
existence oracle for keys that cannot read (write-, forget-, propose- and review-only)."""

from __future__ import annotations

import itertools

import grpc
import pytest

from brain.server.domain.cursors import Kind, Tokens
from brain.server.errors import InvalidArgument
from brain.v1 import audit_pb2, common_pb2, memory_pb2, review_pb2

from .conftest import BrainServer, unique
from .edge import RANDOM_ID, outcome
from .helpers import Api
from .test_audit import admin


async def events(api: Api, **kw: object) -> audit_pb2.ListAuditEventsResponse:
    return await api.audit.ListAuditEvents(
        audit_pb2.ListAuditEventsRequest(scope=api.scope(), **kw), metadata=api.md
    )


async def test_only_a_tenant_wide_auditor_sees_the_chain(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A key confined to alice, and an unconfined key without audit:chain, list their events
    with no seq or hash (the gaps counted hidden events: before, alice saw seq 1 then 3);
    an unconfined audit:chain key lists every event, gapless and linked."""
    tenant = unique("t")
    rw = "memories:read,memories:write,audit:read"
    alice = Api(channel, brain_server.mint_key(tenant, "alice", permissions=rw, user="alice"),
                user_id="alice")  # fmt: skip
    bob = Api(channel, brain_server.mint_key(tenant, "bob", permissions=rw, user="bob"),
              user_id="bob")  # fmt: skip
    wide = Api(channel, brain_server.mint_key(tenant, "ops", permissions=rw))
    chain = Api(channel, brain_server.mint_key(tenant, "auditor", permissions=rw + ",audit:chain",
                                               labels=("team", "hr")))  # fmt: skip
    first = (await alice.save("alice's first note")).memory.id
    await bob.save("bob's private note")
    await bob.save("bob's second private note")
    second = (await alice.save("alice's second note")).memory.id

    mine = (await events(alice)).events
    assert [list(e.memory_ids) for e in mine] == [[first], [second]]  # positive control
    assert {(e.seq, e.prev_hash, e.hash) for e in mine} == {(0, "", "")}
    unchained = (await events(wide)).events
    assert len([e for e in unchained if e.memory_ids]) == 4  # the four saves
    assert {(e.seq, e.prev_hash, e.hash) for e in unchained} == {(0, "", "")}

    full = (await events(chain)).events
    assert [e.seq for e in full] == list(range(1, len(full) + 1))  # keys minted, 4 saves
    assert len([e for e in full if e.memory_ids]) == 4
    assert all(e.prev_hash == p.hash for p, e in itertools.pairwise(full))


async def test_audit_pages_and_watch_cursors_are_sealed(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Page tokens and Watch cursors carry the position encrypted and afresh each time:
    no number to read (before: ``<seq>.<mac>``) and no equality to compare; the server
    still resumes from them (positive control)."""
    tenant = unique("t")
    alice = Api(
        channel,
        brain_server.mint_key(
            tenant, "alice", permissions="memories:read,memories:write,audit:read", user="alice"
        ),
        user_id="alice",
    )
    for i in range(3):
        await alice.save(f"alice note {i}")
    page = await events(alice, page_size=1)
    again = await events(alice, page_size=1)
    token = page.next_page_token
    assert token and token != again.next_page_token  # same position, different tokens
    assert not token.partition(".")[0].isdigit()
    holder = await alice.whoami()
    with pytest.raises(InvalidArgument):
        Tokens(b"another deployment's pepper").decode_seq(
            holder, "page_token", token, kind=Kind.AUDIT
        )
    rest = await events(alice, page_token=token)
    assert [e.memory_ids for e in rest.events] == [
        e.memory_ids for e in (await events(alice)).events[1:]
    ]

    call = alice.memories.WatchMemories(
        memory_pb2.WatchMemoriesRequest(scope=alice.scope()), metadata=alice.md
    )
    marker = await call.read()
    call.cancel()
    assert marker.cursor and not marker.cursor.partition(".")[0].isdigit()
    opened = Tokens(brain_server.cluster.pepper).decode_seq(
        holder, "cursor", marker.cursor, kind=Kind.WATCH
    )
    head = brain_server.sql(
        "SELECT max(seq) FROM audit_events e JOIN tenants t USING (tenant_id) WHERE t.name = $1",
        tenant,
    )[0][0]
    assert opened == head  # the server's own reading: the head of the tenant's log


async def test_keys_that_cannot_read_get_a_random_ids_error_for_what_they_cannot_act_on(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Write-only, forget-only, propose-only and review-only keys naming a memory they can
    neither read nor act on get exactly a random id's error (before: PERMISSION_DENIED or
    FAILED_PRECONDITION told it exists); each also acts on its own row (positive control),
    and a key that can read still hears why (PERMISSION_DENIED)."""
    tenant = unique("t")

    def key(principal: str, permissions: str, user: str | None = "alice") -> Api:
        minted = brain_server.mint_key(tenant, principal, permissions=permissions, user=user)
        return Api(channel, minted, user_id=user or "")

    team = Api(
        channel, brain_server.mint_key(tenant, "lead", permissions="memories:read,memories:write")
    )
    shared = (await team.save("The team deploys on Fridays")).memory.id
    writer = key("alice", "memories:write")
    forgetter = key("alice", "memories:forget")
    reader = key("alice", "memories:read,memories:write")
    proposer = key("agent", "memories:propose")
    reviewer = key("reviewer", "memories:review", user=None)

    async def same_as_random(call: object, make: object) -> None:
        seen = await outcome(make(shared))  # type: ignore[operator]
        baseline = await outcome(make(RANDOM_ID))  # type: ignore[operator]
        assert baseline[0] == grpc.StatusCode.NOT_FOUND, call
        assert seen == baseline, call

    def update(api: Api):  # type: ignore[no-untyped-def]
        return lambda i: api.update(i, ["importance"], importance=0.5)

    def supersede(api: Api):  # type: ignore[no-untyped-def]
        return lambda i: api.save(f"replacement {unique('x')}", supersedes=[i])

    def forget(api: Api):  # type: ignore[no-untyped-def]
        return lambda i: api.forget(i)

    def withdraw(api: Api):  # type: ignore[no-untyped-def]
        return lambda i: api.review.WithdrawCandidate(
            review_pb2.WithdrawCandidateRequest(scope=api.scope(), id=i, reason="x"),
            metadata=api.md,
        )

    def review(api: Api):  # type: ignore[no-untyped-def]
        return lambda i: api.review.ReviewCandidate(
            review_pb2.ReviewCandidateRequest(
                scope=api.scope(), id=i, decision=review_pb2.REVIEW_DECISION_APPROVE, reason="ok"
            ),
            metadata=api.md,
        )

    await same_as_random("write-only update", update(writer))
    await same_as_random("write-only supersede", supersede(writer))
    await same_as_random("forget-only forget", forget(forgetter))
    await same_as_random("propose-only withdraw", withdraw(proposer))
    await same_as_random("review-only review", review(reviewer))

    # Positive controls: each acts on what is its own to act on.
    own = (await writer.save("alice's own note")).memory.id
    assert (await update(writer)(own)).id == own
    assert (await forget(forgetter)(own)).id == own
    proposal = await proposer.review.ProposeMemory(
        review_pb2.ProposeMemoryRequest(
            scope=proposer.scope(),
            memory=common_pb2.MemoryDraft(content="alice would like standups at ten"),
            reason="she said so in the retro",
        ),
        metadata=proposer.md,
    )
    approved = await review(reviewer)(proposal.candidate.id)
    assert approved.memory.id == proposal.candidate.id
    assert (await outcome(withdraw(proposer)(proposal.candidate.id)))[0] == (
        grpc.StatusCode.FAILED_PRECONDITION  # its own proposal: it may hear it was approved
    )
    # A key that reads the row may hear why it cannot change it.
    denied = await outcome(update(reader)(shared))
    assert denied[0] == grpc.StatusCode.PERMISSION_DENIED

    # The proposal path: a propose-only key naming a team memory in supersedes (a success
    # told that it exists), and a write-only key whose save becomes a proposal in a
    # review-required namespace, answer as for a random id; naming its own approved
    # proposal works (control).
    def propose_over(api: Api):  # type: ignore[no-untyped-def]
        return lambda i: api.review.ProposeMemory(
            review_pb2.ProposeMemoryRequest(
                scope=api.scope(),
                memory=common_pb2.MemoryDraft(content=f"a correction {unique('c')}"),
                reason="it changed",
                supersedes=[i],
            ),
            metadata=api.md,
        )

    await same_as_random("propose-only supersedes", propose_over(proposer))
    assert (await propose_over(proposer)(proposal.candidate.id)).candidate.id
    brain_server.admin("namespaces", "set", "proj", "--tenant", tenant, "--review-required")
    await same_as_random("write-only supersedes, review-required", supersede(writer))


def test_audit_chain_is_minted_only_for_a_tenant_wide_key(brain_server: BrainServer) -> None:
    """brain-admin refuses audit:chain on a confined key or without audit:read, in one line,
    and mints it for a key confined to nothing (positive control)."""
    tenant = unique("t")
    admin(brain_server, "tenants", "create", tenant)
    base = ["keys", "create", "--tenant", tenant, "--principal", "auditor"]
    confined = admin(brain_server, *base, "--user", "alice",
                     "--permissions", "audit:read,audit:chain")  # fmt: skip
    assert confined.returncode != 0 and "audit:chain" in confined.stderr
    assert "Traceback" not in confined.stderr
    alone = admin(brain_server, *base, "--permissions", "audit:chain")
    assert alone.returncode != 0 and "audit:read" in alone.stderr
    ok = admin(brain_server, *base, "--permissions", "audit:read,audit:chain")
    assert ok.returncode == 0, ok.stderr
