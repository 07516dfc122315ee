"""The entity graph under the walls (issue 19), with and without the application filter.

An entity or relation is visible exactly when a memory asserting it is: across users,
namespaces, sessions, labels and tenants an entity known only from invisible memories is
NOT_FOUND byte-identical to a name never used, its counts and relations leave out what
the caller cannot see, and neither a walk nor the graph lane passes through it. Every
check sits beside a positive one in the same test; the second run switches the SQL
visibility predicate off so row-level security alone must hold.
"""

from __future__ import annotations

import secrets

import grpc
import pytest

from brain.v1 import graph_pb2

from .conftest import BrainServer, unique
from .edge import outcome
from .graph_helpers import draft, facts, lookup_call, names, neighbours_call, save
from .helpers import Api

pytestmark = pytest.mark.usefixtures("walled_server")
WRITER = "memories:read,memories:write,memories:forget"


async def hidden_like_unknown(api: Api, name: str) -> bool:
    """Lookup and Neighbours of ``name`` fail exactly as for a name never used."""
    never = f"never-used-{secrets.token_hex(6)}"
    for call in (lookup_call, neighbours_call):
        seen, expected = await outcome(call(api, name)), await outcome(call(api, never))
        if expected[0] != grpc.StatusCode.NOT_FOUND or seen != expected:
            return False
    return True


async def test_user_wall_hides_entities_relations_and_counts(
    walled_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Bob does not see the entity only Alice's memory asserts, nor her relations of a
    shared entity, nor her share of its counts; Alice sees all of it."""
    token = secrets.token_hex(4)
    tenant = unique("gw-user")
    keys = {
        u: walled_server.mint_key(tenant, u, permissions=WRITER, user=u, namespaces=("proj",))
        for u in ("alice", "bob")
    }
    alice = Api(channel, keys["alice"], namespace="proj", user_id="alice")
    bob = Api(channel, keys["bob"], namespace="proj", user_id="bob")
    secret, shared = f"Secret{token}", f"Shared{token}"
    await save(alice, "alice's own note", draft([(secret, "person", ["sec"])],
                                                 [(secret, "reports_to", shared)]))  # fmt: skip
    await save(
        Api(channel, walled_server.mint_key(tenant, "lead", permissions=WRITER,
                                            namespaces=("proj",)), namespace="proj"),
        "a team note", draft([], [(shared, "knows", "Public")]),
    )  # fmt: skip

    assert await hidden_like_unknown(bob, secret)
    assert await hidden_like_unknown(bob, "sec")
    seen_by_bob = await lookup_call(bob, shared)
    assert facts(seen_by_bob) == {(shared.lower(), "knows", "public")}
    assert (seen_by_bob.entity.mention_count, seen_by_bob.entity.degree) == (1, 1)
    assert names(await neighbours_call(bob, shared, depth=3)) == {"public": 1}

    seen_by_alice = await lookup_call(alice, shared)
    assert (seen_by_alice.entity.mention_count, seen_by_alice.entity.degree) == (2, 2)
    assert names(await neighbours_call(alice, "public", depth=2)) == {
        shared.lower(): 1, secret.lower(): 2,
    }  # fmt: skip
    assert (await lookup_call(alice, "SEC")).entity.name == secret


async def test_namespace_session_label_and_tenant_walls(
    walled_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """An entity asserted only in another namespace, another session, under a label the
    key lacks or in another tenant is unknown to the key; in its own bucket it is found."""
    token = secrets.token_hex(4)
    tenant = unique("gw-walls")
    wide = Api(
        channel,
        walled_server.mint_key(tenant, "wide", permissions=WRITER, labels=("team", "hr")),
        namespace="proj",
    )
    in_proj = Api(
        channel,
        walled_server.mint_key(tenant, "p", permissions=WRITER, namespaces=("proj",)),
        namespace="proj",
    )
    in_ops = Api(
        channel,
        walled_server.mint_key(tenant, "o", permissions=WRITER, namespaces=("ops",)),
        namespace="ops",
    )
    s1 = Api(
        channel,
        walled_server.mint_key(tenant, "s1", permissions=WRITER, namespaces=("proj",),
                               session="s1"),
        namespace="proj", session_id="s1",
    )  # fmt: skip
    s2 = Api(
        channel,
        walled_server.mint_key(tenant, "s2", permissions=WRITER, namespaces=("proj",),
                               session="s2"),
        namespace="proj", session_id="s2",
    )  # fmt: skip
    elsewhere = Api(channel, walled_server.mint_key(unique("gw-other"), "x", permissions=WRITER))

    await save(in_ops, "ops note", draft([f"OpsOnly{token}"]))
    await save(in_proj, "proj note", draft([f"ProjOnly{token}"]))
    await save(s1, "session note", draft([f"SessionOnly{token}"]))
    await save(wide, "payroll note", draft([f"Payroll{token}"]), labels=["hr"])
    await save(wide, "team payroll note", draft([f"TeamPay{token}"]))
    await save(elsewhere, "other tenant note", draft([f"OtherTenant{token}"]))

    for api, hidden, own in (
        (in_proj, f"OpsOnly{token}", f"ProjOnly{token}"),
        (in_ops, f"ProjOnly{token}", f"OpsOnly{token}"),
        (s2, f"SessionOnly{token}", f"ProjOnly{token}"),
        (in_proj, f"Payroll{token}", f"TeamPay{token}"),
        (in_proj, f"OtherTenant{token}", f"ProjOnly{token}"),
        (elsewhere, f"ProjOnly{token}", f"OtherTenant{token}"),
    ):
        assert await hidden_like_unknown(api, hidden), (api.namespace, hidden)
        assert (await lookup_call(api, own)).entity.mention_count == 1, (api.namespace, own)
    assert (await lookup_call(s1, f"SessionOnly{token}")).entity.mention_count == 1
    assert (await lookup_call(wide, f"Payroll{token}")).entity.mention_count == 1


async def test_a_single_valued_relation_closes_only_facts_the_writer_may_change(
    walled_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Bob's new object of a single-valued relation leaves Alice's fact open (a write never
    reaches across the wall); Alice's own new object closes it (the control)."""
    from datetime import UTC, datetime

    token = secrets.token_hex(4)
    tenant = unique("gw-close")
    apis = {
        u: Api(
            channel,
            walled_server.mint_key(tenant, u, permissions=WRITER, user=u, namespaces=("proj",)),
            namespace="proj",
            user_id=u,
        )
        for u in ("alice", "bob")
    }
    ann = f"Ann{token}"
    one = ["lives_in"]

    def lives(city: str, year: int) -> graph_pb2.GraphDraft:
        return draft([], [(ann, "lives_in", city)], one=one,
                     valid_from=datetime(year, 1, 1, tzinfo=UTC))  # fmt: skip

    await save(apis["alice"], "ann in paris", lives("Paris", 2020))
    await save(apis["bob"], "ann in berlin", lives("Berlin", 2022))
    alice_view = await lookup_call(apis["alice"], ann)
    assert facts(alice_view) == {(ann.lower(), "lives_in", "paris")}
    assert not alice_view.relations[0].HasField("valid_to")
    assert facts(await lookup_call(apis["bob"], ann)) == {(ann.lower(), "lives_in", "berlin")}
    await save(apis["alice"], "ann in rome", lives("Rome", 2024))
    closed = await lookup_call(apis["alice"], ann, any_valid_time=True)
    ends = {r.object.name: r.valid_to.ToDatetime(tzinfo=UTC) for r in closed.relations
            if r.HasField("valid_to")}  # fmt: skip
    assert ends == {"Paris": datetime(2024, 1, 1, tzinfo=UTC)}
