"""Audit reads respect confinement and labels (issue 11, class 7).

A key with audit:read lists only events about memories it may see (every memory the
event names; labels bind unconfined keys too); tenant events (keys, tenants, namespace
policies) and events about anyone else's memories need a key confined to nothing. The
chain still verifies.
"""

from __future__ import annotations

from typing import Any

import grpc

from brain.v1 import audit_pb2, common_pb2

from .conftest import BrainServer, unique
from .helpers import Api

AUDITOR = "memories:read,memories:write,audit:read"


async def events(api: Api, **kw: Any) -> list[audit_pb2.AuditEvent]:
    out: list[audit_pb2.AuditEvent] = []
    token = ""
    while True:
        response = await api.audit.ListAuditEvents(
            audit_pb2.ListAuditEventsRequest(
                scope=api.scope(), page_size=2, page_token=token, **kw
            ),
            metadata=api.md,
        )
        out.extend(response.events)
        token = response.next_page_token
        if not token:
            return out


def ids(listed: list[audit_pb2.AuditEvent]) -> set[str]:
    return {m for e in listed for m in e.memory_ids}


async def test_confined_keys_list_only_events_of_what_they_cover(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """alice's and a namespace key's audit pages hold their memories' events only; an
    unconfined auditor sees the whole tenant."""
    tenant = unique("t")
    auditor = Api(channel, brain_server.mint_key(tenant, "auditor", permissions=AUDITOR,
                                                 labels=("team", "secret")))  # fmt: skip
    alice = Api(
        channel,
        brain_server.mint_key(tenant, "alice", permissions=AUDITOR, user="alice"),
        user_id="alice",
    )
    bob = Api(
        channel,
        brain_server.mint_key(tenant, "bob", permissions=AUDITOR, user="bob"),
        user_id="bob",
    )
    proj = Api(channel, brain_server.mint_key(tenant, "ci", permissions=AUDITOR,
                                              namespaces=("proj",)))  # fmt: skip
    team_row = (await auditor.save("Retro every other Friday")).memory.id
    secret_row = (await auditor.save("Reorg in May", labels=["secret"])).memory.id
    alices = (await alice.save("Alice's dentist is Tuesday")).memory.id
    bobs = (await bob.save("Bob is job hunting")).memory.id
    other_ns = (
        await auditor.save("Ops pager rota", scope=auditor.scope(namespace="ops"))
    ).memory.id
    await bob.update(bobs, ["importance"], importance=0.9)

    everything = await events(auditor)
    assert ids(everything) == {team_row, secret_row, alices, bobs, other_ns}  # control
    assert any(e.method.startswith("admin.") for e in everything)

    seen_by_alice = await events(alice)
    assert ids(seen_by_alice) == {team_row, alices}
    assert all(e.memory_ids for e in seen_by_alice)  # no tenant or key events
    assert {e.principal for e in seen_by_alice} == {"auditor", "alice"}
    assert ids(await events(bob)) == {team_row, bobs}
    assert ids(await events(proj)) == {team_row, alices, bobs}

    # Asking for an event of a memory it cannot see answers an empty page, as for a random id.
    assert await events(alice, memory_id=bobs) == []
    assert [e.memory_ids for e in await events(alice, memory_id=alices)] == [[alices]]

    verified = brain_server.admin("audit", "verify", "--tenant", tenant)
    assert "ok" in verified.stdout


async def test_audit_events_of_erased_memories_stay_within_confinement(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """After a forget the event still lists for its owner and stays hidden from others."""
    tenant = unique("t")
    alice = Api(
        channel,
        brain_server.mint_key(
            tenant, "alice", permissions=AUDITOR + ",memories:forget", user="alice"
        ),
        user_id="alice",
    )
    bob = Api(
        channel,
        brain_server.mint_key(tenant, "bob", permissions=AUDITOR, user="bob"),
        user_id="bob",
    )
    gone = (await alice.save("Alice's new address is 1 Main St")).memory.id
    await alice.forget(gone)
    assert (await alice.get(gone)).status == common_pb2.MEMORY_STATUS_RETRACTED
    assert [e.method for e in await events(alice)] == [
        "/brain.v1.MemoryService/SaveMemory",
        "/brain.v1.MemoryService/ForgetMemory",
    ]
    assert await events(bob) == []
    # Positive control: bob's own writes do reach bob, and still none of alice's.
    mine = (await bob.save("Bob's desk is on floor 3")).memory.id
    assert ids(await events(bob)) == {mine}


async def test_unconfined_audit_key_lists_no_events_of_memories_its_labels_hide(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Labels bind audit reads too: an unconfined `team` auditor does not learn the ids (or
    who touched them, when) of `hr` memories, by listing or by the memory_id filter; it
    does see its own label's events, and an auditor holding both labels sees both."""
    tenant = unique("t")
    team_auditor = Api(channel, brain_server.mint_key(tenant, "aud", permissions=AUDITOR))
    full_auditor = Api(channel, brain_server.mint_key(tenant, "aud2", permissions=AUDITOR,
                                                      labels=("team", "hr")))  # fmt: skip
    hr = Api(channel, brain_server.mint_key(tenant, "hr", permissions=AUDITOR, labels=("hr",)))
    hidden = (await hr.save("Payroll moves to the 25th", labels=["hr"])).memory.id
    shown = (await team_auditor.save("Standup is at 9:30")).memory.id

    seen = ids(await events(team_auditor))
    assert shown in seen  # positive control
    assert hidden not in seen
    assert not await events(team_auditor, memory_id=hidden)
    assert [e.memory_ids for e in await events(team_auditor, memory_id=shown)]
    assert {shown, hidden} <= ids(await events(full_auditor))
