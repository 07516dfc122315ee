"""Security review of issue 19 (entity graph): each attack the reviewer proved, now
refused by the rule that closes it, with a positive control."""

from __future__ import annotations

import random
import secrets
import unicodedata
from datetime import UTC, datetime

import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask

from brain.v1 import common_pb2, graph_pb2, memory_pb2

from . import test_graph_extraction as gx
from .conftest import BrainServer, unique
from .graph_helpers import (
    draft,
    facts,
    graph_stub,
    lookup_call,
    names,
    neighbours_call,
    propose,
    save,
    update_graph,
)
from .helpers import Api, rpc_error
from .test_edge_erasure import holders
from .test_graph_extraction import FakeChatServer, wait_for_candidates
from .test_review import candidates, decide

# The extraction server and its chat endpoint (module fixtures of test_graph_extraction).
chat_http = gx.chat_http
extracting_server = gx.extracting_server

WRITER = "memories:read,memories:write,memories:forget"


def lives(ann: str, city: str, year: int) -> graph_pb2.GraphDraft:
    return draft([], [(ann, "lives_in", city)], one=["lives_in"],
                 valid_from=datetime(year, 1, 1, tzinfo=UTC))  # fmt: skip


def ends(resp: graph_pb2.LookupEntityResponse) -> dict[str, datetime | None]:
    return {
        r.object.name: (r.valid_to.ToDatetime(tzinfo=UTC) if r.HasField("valid_to") else None)
        for r in resp.relations
    }


async def test_entity_ids_do_not_tell_whether_invisible_memories_mention_a_name(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """An entity's id is the same whatever its history: Bob forgetting and re-saving a name
    Alice's private memory also mentions gets the same id as for a name only he used, so
    the id no longer tells him that invisible memories mention it."""
    token = secrets.token_hex(4)
    tenant = unique("atk-oracle")
    apis = {
        u: Api(channel, brain_server.mint_key(tenant, u, permissions=WRITER, user=u,
                                              namespaces=("proj",)),
               namespace="proj", user_id=u)
        for u in ("alice", "bob")
    }  # fmt: skip
    alice, bob = apis["alice"], apis["bob"]
    secret, control = f"Secret{token}", f"Control{token}"
    await save(alice, "alice's private note", draft([secret]))
    # Bob cannot see it: NOT_FOUND.
    assert (await rpc_error(lookup_call(bob, secret))).code() == grpc.StatusCode.NOT_FOUND

    first = (await save(bob, "bob probes", draft([secret, control]))).memory.id
    before = {n: (await lookup_call(bob, n)).entity.id for n in (secret, control)}
    assert before[secret] != before[control]  # control: ids tell names apart
    await bob.forget(first)
    await save(bob, "bob probes again", draft([secret, control]))
    after = {n: (await lookup_call(bob, n)).entity.id for n in (secret, control)}
    assert after == before  # shared or not, the same id
    # Alice, who mentioned the name first, sees the very same id: no history in it.
    assert (await lookup_call(alice, secret)).entity.id == before[secret]
    # Relation endpoints carry the same ids.
    await save(bob, "bob relates them", draft([], [(secret, "knows", control)]))
    [rel] = (await lookup_call(bob, control)).relations
    assert (rel.subject.id, rel.object.id) == (before[secret], before[control])


async def test_a_single_valued_fact_closes_only_facts_all_its_readers_can_see_it_close(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A new single-valued fact closes an old one only when every caller who can see the
    old fact can see the new one: a fact under another label, in a user's own scope or in
    a session leaves the shared fact open, so no reader sees an invisible fact's date."""
    token = secrets.token_hex(4)
    tenant = unique("atk-close")
    wide_key = brain_server.mint_key(tenant, "wide", permissions=WRITER, labels=("team", "hr"))
    wide = Api(channel, wide_key, namespace="proj")
    reader_key = brain_server.mint_key(tenant, "reader", permissions=WRITER, namespaces=("proj",))
    reader = Api(channel, reader_key, namespace="proj")
    ann = f"Ann{token}"
    await save(wide, "ann in paris", lives(ann, "Paris", 2020))
    # control: the reader sees the fact open-ended
    assert ends(await lookup_call(reader, ann, any_valid_time=True)) == {"Paris": None}
    await save(wide, "ann in berlin (hr only)", lives(ann, "Berlin", 2023), labels=["hr"])
    # the reader cannot see the hr fact
    assert (await rpc_error(lookup_call(reader, "Berlin"))).code() == grpc.StatusCode.NOT_FOUND
    seen = await lookup_call(reader, ann, any_valid_time=True)
    assert facts(seen) == {(ann.lower(), "lives_in", "paris")}
    assert ends(seen) == {"Paris": None}  # labels: the hr fact closed nothing
    # The writer sees both open (as for a many-valued relation).
    assert ends(await lookup_call(wide, ann, any_valid_time=True)) == {
        "Paris": None, "Berlin": None,
    }  # fmt: skip
    # A fact holding every label of the old one (and more) does close it.
    await save(wide, "ann in madrid (team and hr)", lives(ann, "Madrid", 2024),
               labels=["team", "hr"])  # fmt: skip
    assert ends(await lookup_call(reader, ann, any_valid_time=True)) == {
        "Paris": datetime(2024, 1, 1, tzinfo=UTC), "Madrid": None,
    }  # fmt: skip

    bea = f"Bea{token}"
    await save(wide, "bea in paris", lives(bea, "Paris", 2020))
    await save(wide, "bea in oslo", lives(bea, "Oslo", 2025))  # control: same bucket
    assert ends(await lookup_call(reader, bea, any_valid_time=True))["Paris"] == datetime(
        2025, 1, 1, tzinfo=UTC
    )
    cy = f"Cy{token}"
    await save(wide, "cy in paris", lives(cy, "Paris", 2020))
    private = Api(channel, wide.key, namespace="private")
    await save(private, "cy in lima (private namespace)", lives(cy, "Lima", 2024))
    assert (await rpc_error(lookup_call(reader, "Lima"))).code() == grpc.StatusCode.NOT_FOUND
    seen = await lookup_call(reader, cy, any_valid_time=True)
    assert ends(seen) == {"Paris": None}  # no close across namespaces

    # Users and sessions: a fact in Alice's own scope (or in a session) leaves the
    # team-shared fact open for Bob (confined to his user) and for session s2.
    bob = Api(channel, brain_server.mint_key(tenant, "bob", permissions=WRITER, user="bob",
                                             namespaces=("proj",)),
              namespace="proj", user_id="bob")  # fmt: skip
    dee = f"Dee{token}"
    await save(wide, "dee in paris (team-shared)", lives(dee, "Paris", 2020))
    as_alice = Api(channel, wide.key, namespace="proj", user_id="alice")
    await save(as_alice, "dee in rome (alice's own)", lives(dee, "Rome", 2021))
    assert (await rpc_error(lookup_call(bob, "Rome"))).code() == grpc.StatusCode.NOT_FOUND
    assert ends(await lookup_call(bob, dee, any_valid_time=True)) == {"Paris": None}
    eve = f"Eve{token}"
    await save(wide, "eve in paris (session-less)", lives(eve, "Paris", 2020))
    in_s1 = Api(channel, wide.key, namespace="proj", session_id="s1")
    s2 = Api(channel, brain_server.mint_key(tenant, "s2", permissions=WRITER,
                                            namespaces=("proj",), session="s2"),
             namespace="proj", session_id="s2")  # fmt: skip
    await save(in_s1, "eve in kyiv (session s1)", lives(eve, "Kyiv", 2022))
    assert (await rpc_error(lookup_call(s2, "Kyiv"))).code() == grpc.StatusCode.NOT_FOUND
    assert ends(await lookup_call(s2, eve, any_valid_time=True)) == {"Paris": None}
    # control: a shared fact closes the one in Alice's own scope (whoever sees hers sees it)
    await save(wide, "dee in oslo (team-shared)", lives(dee, "Oslo", 2023))
    assert ends(await lookup_call(as_alice, dee, any_valid_time=True)) == {
        "Paris": datetime(2023, 1, 1, tzinfo=UTC), "Rome": datetime(2023, 1, 1, tzinfo=UTC),
        "Oslo": None,
    }  # fmt: skip


async def test_forgetting_the_closing_memory_reopens_what_it_closed(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Forgetting the memory whose single-valued relation closed another fact reopens that
    fact, at every transaction time: the erased fact's date is left nowhere."""
    token = secrets.token_hex(4)
    tenant = unique("atk-forget-close")
    api = Api(channel, brain_server.mint_key(tenant, "w", permissions=WRITER), namespace="proj")
    ann = f"Ann{token}"
    await save(api, "ann in paris", lives(ann, "Paris", 2020))
    berlin = (await save(api, "ann in berlin", lives(ann, "Berlin", 2023))).memory
    # control: before the forget, Paris is closed by Berlin (as designed)
    assert ends(await lookup_call(api, ann, any_valid_time=True)) == {
        "Paris": datetime(2023, 1, 1, tzinfo=UTC), "Berlin": None,
    }  # fmt: skip
    await api.forget(berlin.id)
    after = await lookup_call(api, ann, any_valid_time=True)
    assert facts(after) == {(ann.lower(), "lives_in", "paris")}
    assert ends(after) == {"Paris": None}
    assert facts(await lookup_call(api, ann)) == {(ann.lower(), "lives_in", "paris")}
    # As of the moment Berlin was saved, too: the close is gone from history.
    then = await lookup_call(api, ann, any_valid_time=True, as_of=berlin.recorded_at)
    assert ends(then) == {"Paris": None}


async def test_forgetting_a_closer_keeps_a_later_close_of_the_same_fact(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Paris closed by Berlin (2023), its closed copy closed again by Rome (2021): forgetting
    Berlin leaves Paris ending where Rome begins, and forgetting Rome too reopens it."""
    token = secrets.token_hex(4)
    tenant = unique("atk-forget-chain")
    api = Api(channel, brain_server.mint_key(tenant, "w", permissions=WRITER), namespace="proj")
    ann = f"Ann{token}"
    await save(api, "ann in paris", lives(ann, "Paris", 2020))
    berlin = (await save(api, "ann in berlin", lives(ann, "Berlin", 2023))).memory
    rome = (await save(api, "ann in rome", lives(ann, "Rome", 2021))).memory
    # control: both closes hold, the later one (Rome's) on the copy Berlin's left
    assert ends(await lookup_call(api, ann, any_valid_time=True)) == {
        "Paris": datetime(2021, 1, 1, tzinfo=UTC), "Rome": None, "Berlin": None,
    }  # fmt: skip
    await api.forget(berlin.id)
    assert ends(await lookup_call(api, ann, any_valid_time=True)) == {
        "Paris": datetime(2021, 1, 1, tzinfo=UTC), "Rome": None,
    }  # fmt: skip
    await api.forget(rome.id)
    assert ends(await lookup_call(api, ann, any_valid_time=True)) == {"Paris": None}


async def test_bad_inputs_are_invalid_argument_never_internal(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Malformed names, limits, depths, cardinalities, times and drafts are refused as
    INVALID_ARGUMENT naming the field, never INTERNAL (control: a valid draft saves)."""
    tenant = unique("atk-bad")
    api = Api(channel, brain_server.mint_key(tenant, "w", permissions=WRITER), namespace="proj")
    g = graph_stub(api)
    await save(api, "c0", draft(["ok"]))  # control
    scope = api.scope()
    bad_rel = graph_pb2.GraphDraft()
    bad_rel.relations.add(subject="A", predicate="p", object="B", cardinality=7)
    year = graph_pb2.GraphDraft()
    r = year.relations.add(subject="A", predicate="p", object="B")
    r.valid_from.seconds = 253402300800 + 10  # year 10000
    nul = graph_pb2.GraphDraft()
    nul.entities.add(name="ok", type="a\x00b")
    clash = graph_pb2.GraphDraft()
    clash.entities.add(name="A", aliases=["B"])
    clash.entities.add(name="B")
    self_alias = graph_pb2.GraphDraft()
    self_alias.entities.add(name="A", aliases=["x"])
    self_alias.relations.add(subject="x", predicate="p", object="A")
    calls = {
        "name": g.LookupEntity(graph_pb2.LookupEntityRequest(scope=scope, name="a\x00b"),
                               metadata=api.md),
        "relation_limit": g.LookupEntity(graph_pb2.LookupEntityRequest(
            scope=scope, name="x", relation_limit=-1), metadata=api.md),
        "depth": g.ListNeighbours(graph_pb2.ListNeighboursRequest(
            scope=scope, name="x", depth=-5), metadata=api.md),
        "graph.relations[0].cardinality": save(api, "c1", bad_rel),
        "graph.relations[0].valid_from": save(api, "c2", year),
        "graph.entities[0].type": save(api, "c3", nul),
        "graph.entities[1]": save(api, "c4", clash),
        "graph.relations[0].object": save(api, "c5", self_alias),
    }  # fmt: skip
    for field, call in calls.items():
        err = await rpc_error(call)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, err.details())
        assert (err.details() or "").startswith(field), (field, err.details())


async def test_forget_erases_and_withdraws_the_extracted_candidate(
    extracting_server: BrainServer, chat_http: FakeChatServer
) -> None:
    """Extraction copies a saved memory's text into a candidate superseding it; forgetting
    the memory (by a key that cannot see that candidate) erases the copy in every column
    of every table and withdraws it, so no reviewer can approve it."""
    chat_http.mode = "ok"
    tenant = unique("atk-gx")
    async with extracting_server.channel() as ch:
        agent = Api(
            ch,
            extracting_server.mint_key(
                tenant, "agent", permissions="memories:read,memories:write,memories:propose"
            ),
        )
        ops = Api(
            ch,
            extracting_server.mint_key(
                tenant, "ops", permissions="memories:read,memories:write,memories:forget"
            ),
        )
        reviewer = Api(ch, extracting_server.mint_key(
            tenant, "carol", permissions="memories:read,memories:review"))  # fmt: skip
        needle = f"card4111x{secrets.token_hex(4)}"
        text = f"Nora works at Acme, {needle}"
        kept = f"Nora also works with Bo, keep{secrets.token_hex(4)}"
        saved = (await agent.save(text)).memory
        [candidate_id] = await wait_for_candidates(agent, 1)
        other = (await agent.save(kept)).memory
        assert len(await wait_for_candidates(agent, 2)) == 2
        # control: the copy holds the text, and the column scan finds it
        assert (await reviewer.get(candidate_id)).content == text
        assert "memories.content" in holders(extracting_server, {"t": needle})["t"]
        await ops.forget(saved.id)
        assert holders(extracting_server, {"t": needle}) == {"t": set()}
        copy = await reviewer.get(candidate_id)
        assert (copy.content, copy.status) == ("", common_pb2.MEMORY_STATUS_WITHDRAWN)
        refused = await rpc_error(decide(reviewer, candidate_id, approve=True))
        assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
        # the candidate of a memory not forgotten is untouched, and approvable
        assert len(await candidates(reviewer)) == 1
        [left] = await candidates(reviewer)
        assert (await reviewer.get(left)).content == kept
        assert (await decide(reviewer, left, approve=True)).status == (
            common_pb2.MEMORY_STATUS_ACTIVE
        )
        assert other.id != left


async def test_approval_closes_only_what_the_proposer_could_in_buckets_all_readers_see(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Alice's approved proposal in her own scope closes her own earlier fact, never Bob's
    private fact: the reviewer's wider write power does not carry it across the wall."""
    token = secrets.token_hex(4)
    tenant = unique("atk-approve")
    perms = "memories:read,memories:write,memories:propose,memories:forget"
    apis = {
        u: Api(channel, brain_server.mint_key(tenant, u, permissions=perms, user=u,
                                              namespaces=("proj",)),
               namespace="proj", user_id=u)
        for u in ("alice", "bob")
    }  # fmt: skip
    alice, bob = apis["alice"], apis["bob"]
    reviewer = Api(
        channel,
        brain_server.mint_key(tenant, "carol", permissions="memories:read,memories:review"),
        namespace="proj",
    )
    ann = f"Ann{token}"
    await save(bob, "ann in paris (bob's own)", lives(ann, "Paris", 2020))
    await save(alice, "ann in oslo (alice's own)", lives(ann, "Oslo", 2022))
    # control: Alice's direct save leaves Bob's fact open
    assert ends(await lookup_call(bob, ann, any_valid_time=True)) == {"Paris": None}
    candidate = await propose(alice, "ann in rome (alice's proposal)", lives(ann, "Rome", 2024))
    await decide(reviewer, candidate.id, approve=True)
    assert (await rpc_error(lookup_call(bob, "Rome"))).code() == grpc.StatusCode.NOT_FOUND
    assert ends(await lookup_call(bob, ann, any_valid_time=True)) == {"Paris": None}
    # control: the approval did close Alice's own fact
    assert ends(await lookup_call(alice, ann, any_valid_time=True)) == {
        "Oslo": datetime(2024, 1, 1, tzinfo=UTC), "Rome": None,
    }  # fmt: skip


async def test_extraction_proposes_only_for_keys_that_may_propose(
    extracting_server: BrainServer, chat_http: FakeChatServer
) -> None:
    """A key holding only read+write (which cannot call ProposeMemory) gets nothing
    extracted from its saves; a key that may propose does (control)."""
    chat_http.mode = "ok"
    tenant = unique("atk-gx-perm")
    async with extracting_server.channel() as ch:
        writer = Api(ch, extracting_server.mint_key(
            tenant, "writer", permissions="memories:read,memories:write"))  # fmt: skip
        agent = Api(
            ch,
            extracting_server.mint_key(
                tenant, "agent", permissions="memories:read,memories:write,memories:propose"
            ),
        )
        reviewer = Api(ch, extracting_server.mint_key(
            tenant, "carol", permissions="memories:read,memories:review"))  # fmt: skip
        denied = await rpc_error(propose(writer, "direct proposal", draft(["Zed"])))
        assert denied.code() == grpc.StatusCode.PERMISSION_DENIED  # control
        await writer.save("Nora works at Acme (no propose permission)")
        await agent.save("Nora works at Acme (may propose)")
        [found] = await wait_for_candidates(reviewer, 1)
        assert (await reviewer.get(found)).created_by == "agent"
        # The writer's save is skipped before any extraction starts: still one candidate.
        assert await candidates(reviewer) == [found]


async def test_update_with_a_bad_graph_writes_nothing(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """UpdateMemory with a bad graph is INVALID_ARGUMENT naming the field and leaves no new
    version and the old graph in place (control: a good update adds a version)."""
    tenant = unique("atk-upd")
    api = Api(channel, brain_server.mint_key(tenant, "w", permissions=WRITER), namespace="proj")
    token = secrets.token_hex(4)
    saved = (await save(api, "x note", draft([f"Xan{token}"]))).memory
    bad = graph_pb2.GraphDraft()
    bad.relations.add(subject="A", predicate="Bad Predicate", object="B")
    err = await rpc_error(update_graph(api, saved.id, bad))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.details() or "").startswith("graph.relations[0].predicate")
    assert (await api.get(saved.id)).version == saved.version
    assert (await lookup_call(api, f"Xan{token}")).entity.mention_count == 1
    await update_graph(api, saved.id, draft([f"Yan{token}"]))
    assert (await api.get(saved.id)).version == saved.version + 1


async def test_long_expanding_names_are_not_internal(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A 200-character name that NFKC expands several-fold (the limit is checked before
    normalising) is stored or refused as INVALID_ARGUMENT, never INTERNAL (control: a
    plain name of the same length saves)."""
    cands = [chr(c) for c in range(0x10000) if len(unicodedata.normalize("NFKC", chr(c))) >= 4]
    rnd = random.Random(7)
    api = Api(channel, brain_server.mint_key(unique("atk-long"), "w", permissions=WRITER),
              namespace="proj")  # fmt: skip
    plain = graph_pb2.GraphDraft()
    plain.entities.add(name="n" * 200)
    await save(api, "plain long", plain)  # control
    for i in range(3):
        g = graph_pb2.GraphDraft()
        name = "".join(rnd.choice(cands) for _ in range(200))
        g.entities.add(name=name, aliases=["".join(rnd.choice(cands) for _ in range(200))])
        try:
            await save(api, f"long {i}", g)
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.details()


async def test_extraction_leaves_half_of_the_pending_room_to_others(
    extracting_server: BrainServer, chat_http: FakeChatServer
) -> None:
    """Extraction candidates fill at most half of a namespace's pending-candidate cap: with
    a cap of 4 and three saves, two are extracted and two explicit proposals still fit;
    the cap itself still binds (control: a fifth proposal is refused)."""
    from .test_review import propose as propose_text

    chat_http.mode = "ok"
    tenant = unique("atk-gx-room")
    async with extracting_server.channel() as ch:
        agent = Api(
            ch,
            extracting_server.mint_key(
                tenant, "agent", permissions="memories:read,memories:write,memories:propose"
            ),
        )
        human = Api(
            ch,
            extracting_server.mint_key(
                tenant, "human", permissions="memories:read,memories:propose"
            ),
        )
        reviewer = Api(ch, extracting_server.mint_key(
            tenant, "carol", permissions="memories:read,memories:review"))  # fmt: skip
        extracting_server.admin(
            "namespaces", "set", "proj", "--tenant", tenant, "--max-pending", "4"
        )
        for i in range(3):
            await agent.save(f"Nora works at Acme, note {i}")
        assert len(await wait_for_candidates(reviewer, 2)) == 2
        for i in range(2):
            await propose_text(human, f"Bo works at Initech, note {i}")
        refused = await rpc_error(propose_text(human, "one proposal too many"))
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert len(await candidates(reviewer)) == 4


async def test_the_neighbour_walk_stops_after_its_path_cap(
    brain_server: BrainServer, channel: grpc.aio.Channel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ListNeighbours walks at most MAX_WALK_PATHS paths, nearest first: with the cap at the
    start plus its five direct neighbours, a depth-2 walk returns those five and none of
    the five entities beyond them (control: under the real cap it returns all ten)."""
    from brain.server.domain.graph import reads

    token = secrets.token_hex(4)
    api = Api(channel, brain_server.mint_key(unique("atk-walk"), "w", permissions=WRITER),
              namespace="proj")  # fmt: skip
    hub = f"Hub{token}"
    near = [f"Near{i}{token}" for i in range(5)]
    far = [f"Far{i}{token}" for i in range(5)]
    rels = [(hub, "knows", n) for n in near] + [
        (n, "knows", f) for n, f in zip(near, far, strict=True)
    ]
    await save(api, "the hub's circle", draft([], rels))
    walked = names(await neighbours_call(api, hub, depth=2))
    assert walked == {**{n.lower(): 1 for n in near}, **{f.lower(): 2 for f in far}}
    monkeypatch.setattr(reads, "MAX_WALK_PATHS", 1 + len(near))
    walked = names(await neighbours_call(api, hub, depth=2))
    assert walked == {n.lower(): 1 for n in near}


async def relabel(api: Api, memory_id: str, labels: list[str]) -> None:
    await api.memories.UpdateMemory(
        memory_pb2.UpdateMemoryRequest(
            scope=api.scope(),
            id=memory_id,
            patch=common_pb2.MemoryDraft(labels=labels),
            update_mask=FieldMask(paths=["labels"]),
        ),
        metadata=api.md,
    )


async def test_a_relabel_undoes_closes_its_readers_could_no_longer_see(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """When the closing memory is relabelled away from the closed fact's readers, or the
    closed fact's memory gains a label the closer lacks, the close is undone (control:
    before the relabel the fact was closed, and a relabel that keeps the rule keeps it)."""
    token = secrets.token_hex(4)
    tenant = unique("atk-relabel")
    wide = Api(channel, brain_server.mint_key(tenant, "wide", permissions=WRITER,
                                              labels=("team", "hr")), namespace="proj")  # fmt: skip
    reader = Api(channel, brain_server.mint_key(tenant, "reader", permissions=WRITER),
                 namespace="proj")  # fmt: skip
    hr = Api(channel, brain_server.mint_key(tenant, "hr", permissions=WRITER, labels=("hr",)),
             namespace="proj")  # fmt: skip
    ann, bo = f"Ann{token}", f"Bo{token}"
    closed = {"Paris": datetime(2023, 1, 1, tzinfo=UTC)}
    await save(wide, "ann in paris", lives(ann, "Paris", 2020))
    berlin = (await save(wide, "ann in berlin", lives(ann, "Berlin", 2023))).memory.id
    assert ends(await lookup_call(reader, ann, any_valid_time=True)) == {**closed, "Berlin": None}
    await relabel(wide, berlin, ["team", "hr"])  # still holds every label of Paris
    assert ends(await lookup_call(reader, ann, any_valid_time=True)) == {**closed, "Berlin": None}
    await relabel(wide, berlin, ["hr"])
    assert ends(await lookup_call(reader, ann, any_valid_time=True)) == {"Paris": None}

    paris = (await save(wide, "bo in paris", lives(bo, "Paris", 2020))).memory.id
    await save(wide, "bo in oslo", lives(bo, "Oslo", 2023))
    assert ends(await lookup_call(reader, bo, any_valid_time=True)) == {**closed, "Oslo": None}
    await relabel(wide, paris, ["team", "hr"])  # now hr-only readers see Paris, not Oslo
    assert (await rpc_error(lookup_call(hr, "Oslo"))).code() == grpc.StatusCode.NOT_FOUND
    assert ends(await lookup_call(hr, bo, any_valid_time=True)) == {"Paris": None}
