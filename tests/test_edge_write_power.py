"""Write power follows write scope (issue 11, class 6).

A key confined to a user reads the team-shared memories of its namespace but changes
them only by proposing: a direct update, forget or supersede is PERMISSION_DENIED (it
can read the row, so that says nothing new) and writes nothing. A key confined to a
session likewise changes only its session's memories. Rows it cannot see stay NOT_FOUND,
byte-identical to random ids.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import grpc

from brain.v1 import common_pb2, memory_pb2, review_pb2

from .conftest import BrainServer, unique
from .helpers import Api, rpc_error

ALL_WRITES = "memories:read,memories:write,memories:forget,memories:propose"


def versions(server: BrainServer, memory_id: str) -> int:
    return int(
        server.sql("SELECT count(*) FROM memories WHERE memory_id = $1", uuid.UUID(memory_id))[0][0]
    )


async def test_user_confined_key_changes_team_rows_only_by_proposing(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Update, forget and supersede of a team row by alice's key are refused; her own rows
    and an unconfined key's changes go through; proposing a supersede works."""
    tenant = unique("t")
    admin = Api(channel, brain_server.mint_key(tenant, "admin", permissions=ALL_WRITES))
    alice = Api(
        channel,
        brain_server.mint_key(tenant, "alice", permissions=ALL_WRITES, user="alice"),
        user_id="alice",
    )
    team_row = (await admin.save("The team's API style guide lives in docs/api.md")).memory.id
    own = (await alice.save("Alice prefers tabs")).memory.id
    assert (await alice.get(team_row)).content  # she can read it

    refusals = [
        await rpc_error(alice.update(team_row, ["content"], content="Style guide is gone")),
        await rpc_error(alice.forget(team_row)),
        await rpc_error(alice.save("The guide moved to the wiki", supersedes=[team_row])),
    ]
    for err in refusals:
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "propos" in (err.details() or "")
    assert versions(brain_server, team_row) == 1
    assert (await admin.get(team_row)).status == common_pb2.MEMORY_STATUS_ACTIVE
    moved = "SELECT count(*) FROM memories WHERE content = 'The guide moved to the wiki'"
    assert brain_server.sql(moved)[0][0] == 0

    # Proposing is the way in for a user-confined key.
    proposal = await alice.review.ProposeMemory(
        review_pb2.ProposeMemoryRequest(
            scope=alice.scope(),
            memory=common_pb2.MemoryDraft(content="The guide moved to the wiki"),
            reason="the docs folder was deleted",
            supersedes=[team_row],
        ),
        metadata=alice.md,
    )
    assert proposal.candidate.status == common_pb2.MEMORY_STATUS_CANDIDATE

    # Positive controls: her own rows, and the team row by an unconfined key.
    assert (await alice.update(own, ["content"], content="Alice prefers spaces")).version == 2
    assert (
        await alice.save("Alice prefers two spaces", supersedes=[own])
    ).outcome == memory_pb2.SAVE_OUTCOME_CREATED
    assert (await admin.update(team_row, ["importance"], importance=0.9)).version == 2
    assert (await admin.forget(team_row)).tombstone_id


async def test_write_refusals_for_invisible_rows_match_random_ids(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Another user's row answers update, forget and supersede exactly like a random id."""
    tenant = unique("t")
    alice = Api(
        channel,
        brain_server.mint_key(tenant, "alice", permissions=ALL_WRITES, user="alice"),
        user_id="alice",
    )
    bob = Api(
        channel,
        brain_server.mint_key(tenant, "bob", permissions=ALL_WRITES, user="bob"),
        user_id="bob",
    )
    bobs = (await bob.save("Bob's salary expectation")).memory.id
    mine = (await alice.save("Alice's note")).memory.id

    async def answers(target: str) -> list[tuple[grpc.StatusCode, str]]:
        out = []
        for call in (
            alice.update(target, ["importance"], importance=0.1),
            alice.forget(target),
            alice.save("Replacement", supersedes=[target]),
        ):
            err = await rpc_error(call)
            out.append((err.code(), err.details() or ""))
        return out

    random_answers = await answers(str(uuid.uuid4()))
    assert {code for code, _ in random_answers} == {grpc.StatusCode.NOT_FOUND}
    assert await answers(bobs) == random_answers
    assert versions(brain_server, bobs) == 1
    # Positive controls: the same three calls on alice's own row go through.
    assert (await alice.update(mine, ["importance"], importance=0.1)).version == 2
    assert list((await alice.save("Alice's new note", supersedes=[mine])).memory.supersedes) == [
        mine
    ]
    assert (await alice.forget(mine)).tombstone_id


async def test_session_confined_key_changes_only_its_session(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A session key reads the user's session-less rows but changes only its session's."""
    tenant = unique("t")
    alice = Api(
        channel,
        brain_server.mint_key(tenant, "alice", permissions=ALL_WRITES, user="alice"),
        user_id="alice",
    )
    session = Api(
        channel,
        brain_server.mint_key(
            tenant, "agent:s1", permissions=ALL_WRITES, user="alice", session="s1"
        ),
        user_id="alice",
        session_id="s1",
    )
    long_term = (await alice.save("Alice is allergic to peanuts")).memory.id
    working = (await session.save("Alice is drafting the Q3 report")).memory.id
    assert (await session.get(long_term)).content == "Alice is allergic to peanuts"
    err = await rpc_error(session.update(long_term, ["importance"], importance=0.0))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    err = await rpc_error(session.forget(long_term))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert versions(brain_server, long_term) == 1
    assert (await session.update(working, ["importance"], importance=0.9)).version == 2  # control
    assert (await session.forget(working)).tombstone_id  # control
    assert (await alice.update(long_term, ["importance"], importance=0.9)).version == 2


@dataclass(frozen=True)
class Bucket:
    namespace: str
    user_id: str = ""
    session_id: str = ""


@dataclass(frozen=True)
class KeySpec:
    name: str
    user: str | None = None
    session: str | None = None
    namespaces: tuple[str, ...] = ()

    def sees(self, b: Bucket) -> bool:
        return (
            (not self.namespaces or b.namespace in self.namespaces)
            and (self.user is None or b.user_id in ("", self.user))
            and (self.session is None or b.session_id in ("", self.session))
        )

    def writes(self, b: Bucket) -> bool:
        return (
            self.sees(b)
            and (self.user is None or b.user_id == self.user)
            and (self.session is None or b.session_id == self.session)
        )


MATRIX_KEYS = (
    KeySpec("admin"),
    KeySpec("ci", namespaces=("proj",)),
    KeySpec("alice", user="alice"),
    KeySpec("alice-s1", user="alice", session="s1"),
    KeySpec("bob", user="bob"),
)
MATRIX_BUCKETS = (
    Bucket("proj"),
    Bucket("proj", "alice"),
    Bucket("proj", "alice", "s1"),
    Bucket("proj", "bob"),
    Bucket("ops"),
)


async def test_write_power_matrix_matches_the_reference_model(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Every confinement x bucket x (update, forget, supersede): OK exactly when the model
    says writable, PERMISSION_DENIED when only readable, and otherwise the very bytes a
    random id gets."""
    tenant = unique("t")
    seeder = Api(channel, brain_server.mint_key(tenant, "seeder"), namespace="")
    apis = {
        k.name: Api(
            channel,
            brain_server.mint_key(
                tenant,
                k.name,
                permissions=ALL_WRITES,
                user=k.user,
                session=k.session,
                namespaces=k.namespaces,
            ),
            namespace="proj" if k.namespaces else "",
            user_id=k.user or "",
            session_id=k.session or "",
        )
        for k in MATRIX_KEYS
    }

    async def attempt(api: Api, op: str, target: str, b: Bucket) -> Any:
        if op == "update":
            return await api.update(target, ["importance"], importance=0.25)
        if op == "forget":
            return await api.forget(target)
        scope = api.scope(namespace=api.namespace or b.namespace)
        return await api.save(f"replaces {target}", supersedes=[target], scope=scope)

    outcomes = 0
    for key in MATRIX_KEYS:
        api = apis[key.name]
        for b in MATRIX_BUCKETS:
            scope = common_pb2.Scope(
                namespace=b.namespace, user_id=b.user_id, session_id=b.session_id
            )
            target = (await seeder.save(f"{key.name} may change {b}?", scope=scope)).memory.id
            # In this order each op still finds the row current when the previous one wrote.
            for done, op in enumerate(("update", "supersede", "forget"), start=1):
                where = (key.name, b, op)
                if key.writes(b):
                    await attempt(api, op, target, b)
                    assert versions(brain_server, target) == 1 + done, where
                else:
                    err = await rpc_error(attempt(api, op, target, b))
                    if key.sees(b):
                        assert err.code() == grpc.StatusCode.PERMISSION_DENIED, where
                    else:
                        random = await rpc_error(attempt(api, op, str(uuid.uuid4()), b))
                        assert err.code() == grpc.StatusCode.NOT_FOUND, where
                        assert err.details() == random.details(), where
                    assert versions(brain_server, target) == 1, where
                outcomes += 1
    assert outcomes == len(MATRIX_KEYS) * len(MATRIX_BUCKETS) * 3


async def test_update_cannot_strip_labels_the_key_does_not_hold(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A `team` key may relabel a `[team, hr]` memory only while keeping `hr`: dropping a
    label it does not hold would take the memory from readers it cannot speak for. It may
    still add and drop labels it holds."""
    tenant = unique("t")
    both = Api(channel, brain_server.mint_key(tenant, "lead", labels=("team", "hr", "ops")))
    team = Api(channel, brain_server.mint_key(tenant, "dev", labels=("team", "ops")))
    hr = Api(channel, brain_server.mint_key(tenant, "hr", labels=("hr",)))
    shared = (await both.save("Offsite is in Lisbon in May", labels=["team", "hr"])).memory.id

    err = await rpc_error(team.update(shared, ["labels"], labels=["team"]))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "patch.labels" in (err.details() or "")
    assert "hr" not in (err.details() or "").replace("patch", "")
    assert versions(brain_server, shared) == 1
    assert (await hr.get(shared)).content == "Offsite is in Lisbon in May"

    # Positive control: labels the key holds come and go, the foreign one stays.
    added = await team.update(shared, ["labels"], labels=["team", "ops", "hr"])
    assert sorted(added.labels) == ["hr", "ops", "team"]
    dropped = await team.update(shared, ["labels"], labels=["ops", "hr"])
    assert sorted(dropped.labels) == ["hr", "ops"]
    assert (await hr.get(shared)).content == "Offsite is in Lisbon in May"
    # A key holding the label may drop it.
    narrowed = await both.update(shared, ["labels"], labels=["ops"])
    assert list(narrowed.labels) == ["ops"]
    assert (await rpc_error(hr.get(shared))).code() == grpc.StatusCode.NOT_FOUND
