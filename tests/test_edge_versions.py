"""Issue 11, classes 1 and 8: every version of a memory is visible exactly when its current
version is, and labels mean "a key reads a memory sharing any one of its labels".

A relabel applies to the whole history on every read path: Get with ``as_of``, History,
Export with history, Search/List/BuildContext at an earlier ``as_of``, and a Watch
replayed from the tenant's first event. Each module test runs twice: with the
application's predicate, and with row-level security alone.
"""

from __future__ import annotations

import asyncpg
import grpc
import pytest

from brain.server.storage.memories import VERSION_COLUMNS
from brain.v1 import common_pb2

from .conftest import BrainServer, unique
from .edge import collection_reads, first_event, get_call, hidden_like_random, outcome
from .helpers import Api

WIDE = "memories:read,memories:write,memories:forget"


async def test_relabel_hides_and_shows_the_whole_history(walled_server: BrainServer) -> None:
    """After a relabel to a label the reader lacks, no version of the memory reaches it on any
    path, while a control memory does; relabelled back, every version is visible again."""
    tenant = unique("edge-v")
    start = first_event(walled_server.cluster.pepper)
    async with grpc.aio.insecure_channel(walled_server.target) as channel:
        wide = Api(
            channel, walled_server.mint_key(tenant, "wide", permissions=WIDE,
                                            labels=("team", "secret"))
        )  # fmt: skip
        team = Api(
            channel, walled_server.mint_key(tenant, "team-reader", permissions="memories:read")
        )

        hidden = (await wide.save("versions alpha quartz launch plan")).memory
        assert list(hidden.labels) == ["team"]
        control = (await wide.save("versions alpha quartz control plan")).memory
        control_v2 = await wide.update(
            control.id, ["content"], content="versions alpha quartz control plan two"
        )
        before = control_v2.recorded_at  # hidden still team-labelled, both current
        assert (await get_call(team, hidden.id, as_of=before)).memory.version == 1
        relabelled = await wide.update(hidden.id, ["labels"], labels=["secret"])
        assert relabelled.version == 2
        sentinel = (await wide.save("versions quartz sentinel one")).memory.id

        # The reader: the relabelled memory is gone from every path, every version.
        assert await hidden_like_random(team, hidden.id)
        assert await hidden_like_random(team, hidden.id, as_of=before)
        past = common_pb2.TimeTravel(as_of=before)
        then = await collection_reads(team, "quartz", sentinel=sentinel, time=past, start=start)
        now = await collection_reads(team, "quartz", sentinel=sentinel, start=start)
        for seen in (then, now):
            assert hidden.id not in seen.search | seen.listed | seen.context
            assert hidden.id not in seen.exported_ids | seen.watched_ids
        # Positive controls on the same paths.
        assert control.id in then.search & then.listed & then.context
        assert control.id in now.search & now.listed & now.context
        assert {(control.id, 1), (control.id, 2)} <= now.exported & now.watched
        assert (await get_call(team, control.id, as_of=before)).memory.version == 2

        # The writer, holding both labels, still sees the whole history.
        wide_then = await collection_reads(
            wide, "quartz", sentinel=sentinel, time=past, start=start
        )
        assert hidden.id in wide_then.search & wide_then.listed & wide_then.context
        assert [v.version for v in await wide.history(hidden.id)] == [1, 2]

        # Relabelled back to a label the reader holds: every version is visible again.
        await wide.update(hidden.id, ["labels"], labels=["team", "secret"])
        sentinel = (await wide.save("versions quartz sentinel two")).memory.id
        assert [v.version for v in await team.history(hidden.id)] == [1, 2, 3]
        assert (await get_call(team, hidden.id, as_of=before)).memory.version == 1
        then = await collection_reads(team, "quartz", sentinel=sentinel, time=past, start=start)
        assert hidden.id in then.search & then.listed & then.context
        now = await collection_reads(team, "quartz", sentinel=sentinel, start=start)
        assert {(hidden.id, 1), (hidden.id, 2), (hidden.id, 3)} <= now.exported & now.watched


async def test_forget_applies_to_every_version(walled_server: BrainServer) -> None:
    """After a forget, an earlier version read by as_of, History and Export carries no
    content; the retracted memory stays visible to the same key (its id and status)."""
    tenant = unique("edge-f")
    async with grpc.aio.insecure_channel(walled_server.target) as channel:
        owner = Api(channel, walled_server.mint_key(tenant, "owner", permissions=WIDE))
        saved = (await owner.save("forgettable plover fact", tags=["t1"])).memory
        await owner.update(saved.id, ["content"], content="forgettable plover fact two")
        kept = (await owner.save("kept plover fact")).memory
        await owner.forget(saved.id)
        old = (await get_call(owner, saved.id, as_of=saved.recorded_at)).memory
        assert (old.version, old.content, list(old.tags)) == (1, "", [])
        history = await owner.history(saved.id)
        assert [(v.version, v.content) for v in history] == [(1, ""), (2, ""), (3, "")]
        assert history[-1].status == common_pb2.MEMORY_STATUS_RETRACTED
        exported = {
            (e.memory.id, e.memory.version): e.memory.content
            for e in await owner.export(include_history=True)
        }
        assert {exported[(saved.id, v)] for v in (1, 2, 3)} == {""}
        assert exported[(kept.id, 1)] == "kept plover fact"  # positive control


async def test_labels_mean_any_shared_label(walled_server: BrainServer) -> None:
    """A memory labelled [team, hr] is read by a team-only key and by an hr-only key, not by
    an ops-only key; a memory labelled [hr] only by the hr key."""
    tenant = unique("edge-l")
    async with grpc.aio.insecure_channel(walled_server.target) as channel:
        owner = Api(channel, walled_server.mint_key(tenant, "owner", labels=("team", "hr", "ops")))
        both = (await owner.save("labelled wren both", labels=["team", "hr"])).memory.id
        hr_only = (await owner.save("labelled wren hr", labels=["hr"])).memory.id
        readers = {
            name: Api(
                channel,
                walled_server.mint_key(tenant, name, permissions="memories:read", labels=(name,)),
            )
            for name in ("team", "hr", "ops")
        }
        for name, api in readers.items():
            shown = {
                memory_id
                for memory_id in (both, hr_only)
                if (await outcome(get_call(api, memory_id)))[0] == grpc.StatusCode.OK
            }
            expected = {"team": {both}, "hr": {both, hr_only}, "ops": set()}[name]
            assert shown == expected, name
            for memory_id in {both, hr_only} - expected:
                assert await hidden_like_random(api, memory_id)


async def test_a_memory_never_changes_scope(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Versions of a memory keep its namespace, user and session, even for the database owner:
    moving one is refused, while an ordinary update (same scope) goes through."""
    tenant = unique("edge-s")
    owner = Api(channel, brain_server.mint_key(tenant, "owner"))
    saved = (await owner.save("scoped puffin note")).memory
    assert (
        await owner.update(saved.id, ["content"], content="scoped puffin note two")
    ).version == 2
    with pytest.raises(asyncpg.CheckViolationError, match="never change"):
        brain_server.sql(
            "UPDATE memories SET user_id = 'mallory' WHERE memory_id = $1::uuid", saved.id
        )
    columns = ", ".join(VERSION_COLUMNS)
    moved = ", ".join(
        {"version": "3", "namespace": "'elsewhere'", "retired_at": "NULL"}.get(c, c)
        for c in VERSION_COLUMNS
    )
    with pytest.raises(asyncpg.CheckViolationError, match="never change"):
        brain_server.sql(
            f"INSERT INTO memories ({columns}) SELECT {moved} FROM memories "
            "WHERE memory_id = $1::uuid AND version = 1",
            saved.id,
        )
    assert [v.version for v in await owner.history(saved.id)] == [1, 2]
