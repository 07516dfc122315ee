"""Memory lifecycle: bitemporal versions, supersede, forget, tombstones, TTL, dedupe, labels."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import grpc

from brain.server.domain.retrieval.lanes import RetrievalParams
from brain.v1 import common_pb2, memory_pb2

from .conftest import BrainServer, unique
from .edge import watch_replay
from .helpers import Api, rpc_error, ts


def tenant_rows(server: BrainServer, tenant: str, where: str = "TRUE") -> int:
    rows = server.sql(
        f"SELECT count(*) FROM memories m JOIN tenants t USING (tenant_id) "
        f"WHERE t.name = $1 AND {where}",
        tenant,
    )
    return int(rows[0][0])


def d(year: int, month: int, day: int = 1) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


async def test_bitemporal_correction(brain_server: BrainServer, channel: grpc.aio.Channel) -> None:
    """A fact valid Jan-Jun 2024, then corrected: as-of and valid-at pick the right version."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    before_save = datetime.now(UTC)
    await asyncio.sleep(0.01)
    saved = await api.save(
        "The office lease costs 4000 EUR per month", valid_from=ts(d(2024, 1)),
        valid_to=ts(d(2024, 7)),
    )  # fmt: skip
    memory_id = saved.memory.id
    await asyncio.sleep(0.01)
    after_save = datetime.now(UTC)
    await asyncio.sleep(0.01)
    corrected = await api.update(
        memory_id, ["content"], expected_version=1,
        content="The office lease costs 4200 EUR per month",
    )  # fmt: skip
    assert corrected.version == 2
    assert corrected.valid_from.ToDatetime(tzinfo=UTC) == d(2024, 1)

    # Transaction time: what the brain believed then and now.
    assert (await api.get(memory_id, as_of=ts(after_save))).content.endswith("4000 EUR per month")
    assert (await api.get(memory_id)).content.endswith("4200 EUR per month")
    err = await rpc_error(api.get(memory_id, as_of=ts(before_save)))
    assert err.code() == grpc.StatusCode.NOT_FOUND

    # Valid time: inside the window the fact holds, outside it does not.
    inside = common_pb2.TimeTravel(valid_at=ts(d(2024, 3)))
    outside = common_pb2.TimeTravel(valid_at=ts(d(2024, 9)))
    assert await api.search("office lease", time=inside) == [memory_id]
    assert await api.search("office lease", time=outside) == []
    assert await api.search("office lease") == []  # valid-at defaults to now (2026)
    old = common_pb2.TimeTravel(valid_at=ts(d(2024, 3)), as_of=ts(after_save))
    response = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(scope=api.scope(), query="4000", time=old), metadata=api.md
    )
    assert [h.memory.version for h in response.hits] == [1]
    assert await api.search("4000", time=inside) == []  # the correction replaced it
    listed = await api.list_all(time=common_pb2.TimeTravel(any_valid_time=True))
    assert [m.id for m in listed] == [memory_id]

    versions = await api.history(memory_id)
    assert [(v.version, v.change, v.changed_by) for v in versions] == [
        (1, "save", "alice"),
        (2, "update", "alice"),
    ]
    assert versions[0].retired_at == versions[1].recorded_at


async def test_supersede_hides_old_from_search_but_keeps_it(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A superseded memory leaves search while its replacement is found; Get and History keep it."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    old = (await api.save("Deploys happen on Tuesday")).memory
    new = (await api.save("Deploys happen on Thursday", supersedes=[old.id])).memory
    assert list(new.supersedes) == [old.id]
    assert await api.search("deploys happen") == [new.id]
    kept = await api.get(old.id)
    assert kept.status == common_pb2.MEMORY_STATUS_SUPERSEDED
    assert kept.content == "Deploys happen on Tuesday"
    assert list(kept.superseded_by) == [new.id]
    assert [v.status for v in await api.history(old.id)] == [
        common_pb2.MEMORY_STATUS_ACTIVE,
        common_pb2.MEMORY_STATUS_SUPERSEDED,
    ]
    exported = {e.memory.id: e.memory.status for e in await api.export()}
    assert exported == {
        old.id: common_pb2.MEMORY_STATUS_SUPERSEDED,
        new.id: common_pb2.MEMORY_STATUS_ACTIVE,
    }


async def test_supersede_of_missing_or_foreign_id_writes_nothing(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Naming a missing or invisible target fails the whole save with one identical NOT_FOUND."""
    tenant = unique("t")
    api = Api(channel, brain_server.mint_key(tenant, "alice"))
    other = Api(channel, brain_server.mint_key(unique("t"), "mallory"))
    foreign = (await other.save("Mallory's note")).memory.id
    mine = (await api.save("Alice's note")).memory.id
    missing = str(uuid.uuid4())
    before = tenant_rows(brain_server, tenant)
    for target in (foreign, missing):
        err = await rpc_error(api.save("A replacement", supersedes=[mine, target]))
        assert err.code() == grpc.StatusCode.NOT_FOUND
        assert err.details() == "supersedes: memory not found"
    assert tenant_rows(brain_server, tenant) == before
    assert (await api.get(mine)).status == common_pb2.MEMORY_STATUS_ACTIVE
    assert (await other.get(foreign)).status == common_pb2.MEMORY_STATUS_ACTIVE
    # Positive control: the same save naming only the visible target goes through.
    assert list((await api.save("A replacement", supersedes=[mine])).memory.supersedes) == [mine]


async def test_forget_erases_every_version_and_blocks_the_value(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Forgotten content is gone from Get, Search, History, Export and SQL; re-saving it fails."""
    tenant = unique("t")
    api = Api(
        channel,
        brain_server.mint_key(
            tenant, "alice", permissions="memories:read,memories:write,memories:forget"
        ),
    )
    secret = "The vault combination is 31-7-2049"
    memory = (await api.save(secret + " (draft)")).memory
    await api.update(memory.id, ["content"], content=secret)
    control = (await api.save("The vault is in the basement")).memory
    assert tenant_rows(brain_server, tenant, "content LIKE '%31-7-2049%'") == 2

    forgotten = await api.forget(memory.id)
    assert uuid.UUID(forgotten.tombstone_id)

    got = await api.get(memory.id)
    assert got.status == common_pb2.MEMORY_STATUS_RETRACTED
    assert got.content == ""
    assert await api.search("vault combination") == [control.id]  # only the control remains
    assert {v.content for v in await api.history(memory.id)} == {""}
    exported = {e.memory.id: e.memory.content for e in await api.export(include_history=True)}
    assert exported[memory.id] == ""
    assert exported[control.id] == "The vault is in the basement"
    assert tenant_rows(brain_server, tenant, "content LIKE '%31-7-2049%'") == 0
    assert tenant_rows(
        brain_server, tenant,
        f"memory_id = '{memory.id}' AND (content <> '' OR embedding IS NOT NULL "
        "OR search_tsv <> ''::tsvector OR search_tsv_simple <> ''::tsvector "
        "OR fingerprint IS NOT NULL)",
    ) == 0  # fmt: skip
    assert tenant_rows(brain_server, tenant, f"memory_id = '{memory.id}'") == 3

    err = await rpc_error(api.save("  the VAULT combination is 31-7-2049 "))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert forgotten.tombstone_id in (err.details() or "")
    err = await rpc_error(api.save(secret + " (draft)"))  # older versions are tombstoned too
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert tenant_rows(brain_server, tenant) == 4
    # The tombstone is per bucket: another namespace may hold the value.
    elsewhere = await api.save(secret, scope=api.scope(namespace="other"))
    assert elsewhere.outcome == memory_pb2.SAVE_OUTCOME_CREATED


async def test_crowded_bucket_still_returns_k_active_hits(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Superseded rows matching the query, three times as many as a lane's candidates, do not
    crowd out the 5 active ones."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    crowd = 3 * RetrievalParams().candidates
    old = [(await api.save(f"zebra migration note {i}")).memory.id for i in range(crowd)]
    replacements = []
    per_batch = crowd // 5
    for batch in range(5):
        targets = old[batch * per_batch : (batch + 1) * per_batch]
        saved = await api.save(f"zebra migration summary {batch}", supersedes=targets)
        replacements.append(saved.memory.id)
    assert sorted(await api.search("zebra migration", limit=5)) == sorted(replacements)
    assert len(await api.search("zebra migration", limit=50)) == 5


async def test_expired_memories_leave_recall_but_keep_history(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A memory past its expires_at is not searched or listed, yet Get and History show it.
    An update may expire a memory now; a save of one already expired is refused (it would
    never be recalled) and writes nothing."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    past = datetime.now(UTC) - timedelta(seconds=1)
    err = await rpc_error(api.save("Scratch: build 811 is red", expires_at=ts(past)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.details() or "").startswith("memory.expires_at:")
    soon = datetime.now(UTC) + timedelta(days=1)
    expired = (await api.save("Scratch: build 812 is flaky", expires_at=ts(soon))).memory
    live = (await api.save("Scratch: build 813 is green")).memory
    assert sorted(await api.search("scratch build")) == sorted([live.id, expired.id])  # control
    await api.update(expired.id, ["expires_at"], expires_at=ts(past))
    assert await api.search("scratch build") == [live.id]
    assert [m.id for m in await api.list_all()] == [live.id]
    assert (await api.get(expired.id)).content == "Scratch: build 812 is flaky"
    assert len(await api.history(expired.id)) == 2
    assert "build 811" not in str(brain_server.sql("SELECT content FROM memories"))


async def test_duplicates_and_idempotency_keys(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Exact duplicates return the existing id; idempotency keys replay or refuse."""
    tenant = unique("t")
    api = Api(channel, brain_server.mint_key(tenant, "alice", labels=("team", "ops")))
    first = await api.save("Use Python 3.11 for services")
    again = await api.save("  use PYTHON 3.11   for services ")
    assert again.outcome == memory_pb2.SAVE_OUTCOME_DEDUPLICATED
    assert again.memory.id == first.memory.id
    other_bucket = await api.save("Use Python 3.11 for services", scope=api.scope(user_id="bob"))
    assert other_bucket.memory.id != first.memory.id
    # Another audience is another memory: the same value with other labels is not a duplicate.
    wider = await api.save("Use Python 3.11 for services", labels=["team", "ops"])
    assert (wider.outcome, sorted(wider.memory.labels)) == (
        memory_pb2.SAVE_OUTCOME_CREATED,
        ["ops", "team"],
    )

    a = await api.save("Retry-safe note", idempotency_key="req-1")
    b = await api.save("Retry-safe note", idempotency_key="req-1")
    assert (a.outcome, b.outcome) == (
        memory_pb2.SAVE_OUTCOME_CREATED,
        memory_pb2.SAVE_OUTCOME_REPLAYED,
    )
    assert a.memory.id == b.memory.id
    err = await rpc_error(api.save("A different note", idempotency_key="req-1"))
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS
    assert tenant_rows(brain_server, tenant) == 4


async def test_labels_limit_reads_and_grants(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A key reads only rows sharing a label, and grants only labels it holds."""
    tenant = unique("t")
    hr = Api(channel, brain_server.mint_key(tenant, "hr", labels=("team", "hr")))
    dev = Api(channel, brain_server.mint_key(tenant, "dev", labels=("team",)))
    private = (await hr.save("Salary bands are under review", labels=["hr"])).memory
    shared = (await hr.save("Salary reviews happen in March")).memory
    assert list(shared.labels) == ["team"]
    assert sorted(await hr.search("salary")) == sorted([private.id, shared.id])
    assert await dev.search("salary") == [shared.id]
    err = await rpc_error(dev.get(private.id))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert (await dev.get(shared.id)).id == shared.id
    err = await rpc_error(dev.save("Grant attempt", labels=["hr"]))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "hr" in (err.details() or "")
    granted = await dev.save("Grant attempt", labels=["team"])  # a label it holds: control
    assert list(granted.memory.labels) == ["team"]


async def test_list_pages_and_export_resumes(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """List pages newest first with stable tokens; Export resumes after any cursor."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    ids = [(await api.save(f"note number {i}")).memory.id for i in range(7)]
    listed = await api.list_all(page_size=3)
    assert [m.id for m in listed] == list(reversed(ids))
    err = await rpc_error(
        api.memories.ListMemories(
            memory_pb2.ListMemoriesRequest(scope=api.scope(), page_token="garbage!"),
            metadata=api.md,
        )
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "page_token" in (err.details() or "")

    everything = await api.export()
    assert [e.memory.id for e in everything] == sorted(ids, key=uuid.UUID)
    resumed = await api.export(cursor=everything[2].cursor)
    assert [e.memory.id for e in resumed] == [e.memory.id for e in everything[3:]]


async def test_update_guards(brain_server: BrainServer, channel: grpc.aio.Channel) -> None:
    """Stale versions abort, non-active memories refuse updates, masks must be valid."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    memory = (await api.save("Standup is at 9:30")).memory
    updated = await api.update(
        memory.id, ["content"], expected_version=1, content="Standup at 9:45"
    )
    assert updated.version == 2
    err = await rpc_error(api.update(memory.id, ["content"], expected_version=1, content="x"))
    assert err.code() == grpc.StatusCode.ABORTED
    err = await rpc_error(api.update(memory.id, [], content="x"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    err = await rpc_error(api.update(memory.id, ["created_by"], content="x"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    err = await rpc_error(
        api.update(memory.id, ["valid_to"], valid_to=ts(datetime(2000, 1, 1, tzinfo=UTC)))
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    replacement = (await api.save("Standup moved to 10:00", supersedes=[memory.id])).memory
    err = await rpc_error(api.update(memory.id, ["content"], content="again"))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert (await api.get(replacement.id)).version == 1
    assert (await api.get(memory.id)).version == 3


async def test_concurrent_identical_saves_store_one_row(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A hundred concurrent saves of one value in one bucket leave exactly one memory."""
    tenant = unique("t")
    api = Api(channel, brain_server.mint_key(tenant, "alice"))
    results = await asyncio.gather(*(api.save("Lunch is at noon") for _ in range(100)))
    assert len({r.memory.id for r in results}) == 1
    assert sorted(r.outcome for r in results).count(memory_pb2.SAVE_OUTCOME_CREATED) == 1
    assert tenant_rows(brain_server, tenant) == 1
    other = await api.save("Lunch is at one")  # a different value is its own memory
    assert other.outcome == memory_pb2.SAVE_OUTCOME_CREATED


def audit_events(server: BrainServer, tenant: str) -> int:
    rows = server.sql(
        "SELECT count(*) FROM audit_events e JOIN tenants t USING (tenant_id) WHERE t.name = $1",
        tenant,
    )
    return int(rows[0][0])


async def test_an_update_that_changes_nothing_writes_nothing(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Patches that set every named field to its current value (tags in another order,
    labels as they are, floats as stored) answer the memory as it is: no version, no
    history, no audit event, no Watch change; a stale expected_version is still ABORTED,
    and a real change right after writes version 2 (positive control)."""
    tenant = unique("t")
    api = Api(channel, brain_server.mint_key(tenant, "alice"))
    draft = {
        "kind": "fact", "tags": ["infra", "db"], "metadata": {"owner": "ops"},
        "importance": 0.9, "confidence": 0.7,
    }  # fmt: skip
    memory = (await api.save("Staging listens on 5433", **draft)).memory
    mark = api.memories.WatchMemories(
        memory_pb2.WatchMemoriesRequest(scope=api.scope()), metadata=api.md
    )
    start = (await mark.read()).cursor
    mark.cancel()
    events = audit_events(brain_server, tenant)

    same = [
        await api.update(memory.id, ["labels"], labels=["team"]),
        await api.update(
            memory.id,
            ["content", "kind", "tags", "metadata", "importance", "confidence"],
            content="Staging listens on 5433",
            **{**draft, "tags": ["db", "infra"]},
        ),
        await api.update(
            memory.id, ["valid_from"], expected_version=1, valid_from=memory.valid_from
        ),
    ]
    assert same == [memory] * 3
    stale = await rpc_error(api.update(memory.id, ["labels"], expected_version=7, labels=["team"]))
    assert stale.code() == grpc.StatusCode.ABORTED
    assert len(await api.history(memory.id)) == 1
    assert tenant_rows(brain_server, tenant) == 1
    assert audit_events(brain_server, tenant) == events

    changed = await api.update(memory.id, ["importance"], expected_version=1, importance=0.5)
    assert changed.version == 2 and len(await api.history(memory.id)) == 2
    assert audit_events(brain_server, tenant) == events + 1
    sentinel = (await api.save("written last")).memory.id
    assert await watch_replay(api, sentinel, start) == {(memory.id, 2), (sentinel, 1)}
    stale = await rpc_error(
        api.update(memory.id, ["importance"], expected_version=1, importance=0.5)
    )
    assert stale.code() == grpc.StatusCode.ABORTED


async def test_an_unchanged_patch_is_refused_and_answered_as_a_changing_one(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The no-op rule is no oracle: a key that may not change a row is refused alike for a
    patch that matches it and one that does not, and a key without memories:read is
    answered a new version either way (it must not learn what the row holds), where a key
    that reads the row gets it as it is."""
    tenant = unique("t")
    lead = Api(channel, brain_server.mint_key(tenant, "lead"))
    team_row = (await lead.save("The style guide lives in docs/api.md")).memory.id
    confined = Api(channel, brain_server.mint_key(tenant, "bob", user="bob"), user_id="bob")
    writer = Api(channel, brain_server.mint_key(tenant, "agent", permissions="memories:write"))

    refused = [
        await rpc_error(confined.update(team_row, ["content"], content=content))
        for content in ("The style guide lives in docs/api.md", "The style guide is gone")
    ]
    assert refused[0].code() == grpc.StatusCode.PERMISSION_DENIED
    assert (refused[0].code(), refused[0].details()) == (refused[1].code(), refused[1].details())
    receipts = [
        await writer.update(team_row, ["content"], content=content)
        for content in ("The style guide lives in docs/api.md", "The style guide moved")
    ]
    assert [r.version for r in receipts] == [2, 3] and not receipts[0].content
    assert (await lead.update(team_row, ["content"], content="The style guide moved")).version == 3
