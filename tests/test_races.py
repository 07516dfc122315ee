"""Racing writes on one memory: real concurrent gRPC calls against one server.

Writers of one memory serialise on a per-memory lock, so a waiter applies on the version
the winner left instead of losing the row the winner retired (which answered NOT_FOUND
for a memory that exists), and a forget racing an update always erases.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import asyncpg
import grpc
import pytest

from brain.server.errors import Unavailable
from brain.server.storage import memories as sql
from brain.server.storage.db import Database
from brain.v1 import common_pb2, review_pb2

from .conftest import BrainServer, PgCluster, unique
from .helpers import Api

PAIRS = 20


async def outcome(coro: Any) -> grpc.StatusCode:
    """The status a call ended with (OK when it returned)."""
    try:
        await coro
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def fresh_memories(api: Api, n: int) -> list[str]:
    tag = unique("race")
    saved = await asyncio.gather(*(api.save(f"{tag} fact number {i}") for i in range(n)))
    return [s.memory.id for s in saved]


def versions(server: BrainServer, memory_id: str) -> list[Any]:
    """Every stored version of a memory, read as the owner behind the API."""
    return server.sql(
        "SELECT version, status, content, retired_at, fingerprint IS NULL AND embedding IS NULL "
        "AND tags = '{}' AND metadata = '{}'::jsonb AS blank "
        "FROM memories WHERE memory_id = $1::uuid ORDER BY version",
        memory_id,
    )


def assert_contiguous(rows: list[Any]) -> None:
    assert [r["version"] for r in rows] == list(range(1, len(rows) + 1))
    assert [r["retired_at"] is None for r in rows].count(True) == 1
    assert rows[-1]["retired_at"] is None


async def test_concurrent_blind_updates_both_apply(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Two blind updates of one memory both succeed, one after the other: versions 1, 2, 3."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    ids = await fresh_memories(api, PAIRS)
    results = await asyncio.gather(
        *(
            outcome(api.update(memory_id, ["content"], content=f"{side} edit of {memory_id}"))
            for memory_id in ids
            for side in ("left", "right")
        )
    )
    assert results == [grpc.StatusCode.OK] * (2 * PAIRS)
    for memory_id in ids:
        rows = versions(brain_server, memory_id)
        assert_contiguous(rows)
        assert len(rows) == 3
        assert rows[-1]["content"] in (f"left edit of {memory_id}", f"right edit of {memory_id}")


async def test_expected_version_race_has_one_winner_and_one_aborted(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Two updates expecting version 1: one writes version 2, the other gets ABORTED."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    ids = await fresh_memories(api, PAIRS)
    results = await asyncio.gather(
        *(
            outcome(api.update(memory_id, ["tags"], expected_version=1, tags=[side]))
            for memory_id in ids
            for side in ("left", "right")
        )
    )
    for i, memory_id in enumerate(ids):
        pair = sorted(results[2 * i : 2 * i + 2], key=lambda c: c.value)
        assert pair == [grpc.StatusCode.OK, grpc.StatusCode.ABORTED], pair
        rows = versions(brain_server, memory_id)
        assert_contiguous(rows)
        assert len(rows) == 2


async def test_forget_racing_update_always_erases(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Forget racing an update always succeeds and leaves no content in any version."""
    api = Api(channel, brain_server.mint_key(
        unique("t"), "alice", permissions="memories:read,memories:write,memories:forget"
    ))  # fmt: skip
    ids = await fresh_memories(api, PAIRS)
    keep = (await api.save(f"{unique('control')} is never forgotten")).memory.id
    calls = []
    for i, memory_id in enumerate(ids):  # alternate who is sent first
        update = outcome(api.update(memory_id, ["content"], content=f"new words for {memory_id}"))
        forget = outcome(api.forget(memory_id))
        calls += [update, forget] if i % 2 else [forget, update]
    results = await asyncio.gather(*calls)
    for i, memory_id in enumerate(ids):
        pair = results[2 * i : 2 * i + 2]
        update_code, forget_code = pair if i % 2 else pair[::-1]
        assert forget_code == grpc.StatusCode.OK
        # The update either went first, or found the memory already retracted.
        assert update_code in (grpc.StatusCode.OK, grpc.StatusCode.FAILED_PRECONDITION)
        rows = versions(brain_server, memory_id)
        assert_contiguous(rows)
        assert rows[-1]["status"] == "retracted"
        assert len(rows) == (3 if update_code == grpc.StatusCode.OK else 2)
        for row in rows:
            assert (row["content"], row["blank"]) == ("", True)
    # Positive control: the same reads show content where nothing was forgotten.
    control = versions(brain_server, keep)
    assert control[-1]["status"] == "active" and "never forgotten" in control[-1]["content"]


async def test_concurrent_forgets_both_succeed(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Two forgets of one memory both answer OK; the memory is retracted once and erased."""
    api = Api(channel, brain_server.mint_key(
        unique("t"), "alice", permissions="memories:read,memories:write,memories:forget"
    ))  # fmt: skip
    ids = await fresh_memories(api, PAIRS)
    results = await asyncio.gather(
        *(outcome(api.forget(memory_id)) for memory_id in ids for _ in range(2))
    )
    assert results == [grpc.StatusCode.OK] * (2 * PAIRS)
    for memory_id in ids:
        rows = versions(brain_server, memory_id)
        assert_contiguous(rows)
        assert [r["status"] for r in rows] == ["active", "retracted"]
        assert all((r["content"], r["blank"]) == ("", True) for r in rows)


async def test_concurrent_supersedes_of_one_memory_never_answer_not_found(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Two saves superseding one memory: one wins, the other finds it superseded."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    ids = await fresh_memories(api, PAIRS)
    results = await asyncio.gather(
        *(
            outcome(api.save(f"{side} replacement for {memory_id}", supersedes=[memory_id]))
            for memory_id in ids
            for side in ("left", "right")
        )
    )
    for i, memory_id in enumerate(ids):
        pair = sorted(results[2 * i : 2 * i + 2], key=lambda c: c.value)
        assert pair == [grpc.StatusCode.OK, grpc.StatusCode.FAILED_PRECONDITION], pair
        rows = versions(brain_server, memory_id)
        assert_contiguous(rows)
        assert [r["status"] for r in rows] == ["active", "superseded"]


async def test_concurrent_reviews_of_one_candidate_never_answer_not_found(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Two reviewers deciding one candidate at once: one decides, the other is told it's done."""
    tenant = unique("t")
    proposer = Api(channel, brain_server.mint_key(
        tenant, "agent:proposer", permissions="memories:read,memories:propose"
    ))  # fmt: skip
    reviewers = [
        Api(
            channel,
            brain_server.mint_key(
                tenant, f"reviewer-{n}", permissions="memories:read,memories:review"
            ),
        )
        for n in (1, 2)
    ]
    tag = unique("proposal")
    proposed = await asyncio.gather(
        *(
            proposer.review.ProposeMemory(
                review_pb2.ProposeMemoryRequest(
                    scope=proposer.scope(),
                    memory=common_pb2.MemoryDraft(content=f"{tag} number {i}"),
                    reason="worth keeping",
                ),
                metadata=proposer.md,
            )
            for i in range(PAIRS)
        )
    )
    ids = [p.candidate.id for p in proposed]
    decisions = (review_pb2.REVIEW_DECISION_APPROVE, review_pb2.REVIEW_DECISION_REJECT)
    results = await asyncio.gather(
        *(
            outcome(
                reviewer.review.ReviewCandidate(
                    review_pb2.ReviewCandidateRequest(
                        scope=reviewer.scope(), id=memory_id, decision=decision, reason="checked"
                    ),
                    metadata=reviewer.md,
                )
            )
            for memory_id in ids
            for reviewer, decision in zip(reviewers, decisions, strict=True)
        )
    )
    for i, memory_id in enumerate(ids):
        pair = sorted(results[2 * i : 2 * i + 2], key=lambda c: c.value)
        assert pair == [grpc.StatusCode.OK, grpc.StatusCode.FAILED_PRECONDITION], pair
        rows = versions(brain_server, memory_id)
        assert_contiguous(rows)
        assert rows[0]["status"] == "candidate"
        assert rows[-1]["status"] in ("active", "rejected") and len(rows) == 2


async def test_a_deadlock_between_writers_is_aborted_not_internal(pg_cluster: PgCluster) -> None:
    """Writers locking two memories in opposite orders: the one PostgreSQL aborts gets Conflict."""
    db = await Database.connect(pg_cluster.app_dsn, max_size=2)
    tenant, a, b = str(uuid.uuid4()), uuid.uuid4(), uuid.uuid4()
    holding = [asyncio.Event(), asyncio.Event()]

    async def writer(me: int, first: uuid.UUID, then: uuid.UUID) -> None:
        async with db.tenant_tx(tenant) as conn:
            await sql.lock_memory(conn, tenant, first)
            holding[me].set()
            await holding[1 - me].wait()
            await sql.lock_memory(conn, tenant, then)

    try:
        results = await asyncio.gather(writer(0, a, b), writer(1, b, a), return_exceptions=True)
    finally:
        await db.close()
    assert sorted(type(r).__name__ for r in results) == ["Conflict", "NoneType"], results


async def waiting_for_advisory_locks(holder: Any, n: int, at_most: float | None = None) -> None:
    """Return once ``n`` backends wait on a lock ``holder`` holds (polled). Without
    ``at_most`` the bound only turns a writer that never queues into a failure; with it,
    give up quietly after that long (the holder must let go before a waiter's statement
    timeout)."""
    deadline = time.monotonic() + (90 if at_most is None else at_most)
    while time.monotonic() < deadline:
        blocked = await holder.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))"
        )
        if blocked >= n:
            return
        await asyncio.sleep(0.02)
    if at_most is not None:
        return
    raise AssertionError(f"fewer than {n} writers queued behind the held lock")


async def test_approval_waiting_on_a_target_behind_an_update_is_not_internal(
    brain_server: BrainServer, pg_cluster: PgCluster, channel: grpc.aio.Channel
) -> None:
    """An approval whose superseded target is changed while it waits for the target's lock
    supersedes the new version (it read its clock too early and broke recorded <= retired,
    answering INTERNAL)."""
    tenant = unique("t")
    writer = Api(channel, brain_server.mint_key(tenant, "alice"))
    proposer = Api(channel, brain_server.mint_key(
        tenant, "agent:proposer", permissions="memories:read,memories:propose"
    ))  # fmt: skip
    reviewer = Api(channel, brain_server.mint_key(
        tenant, "reviewer", permissions="memories:read,memories:review"
    ))  # fmt: skip
    tag = unique("target")
    target = (await writer.save(f"{tag} the old fact")).memory.id
    candidate = (
        await proposer.review.ProposeMemory(
            review_pb2.ProposeMemoryRequest(
                scope=proposer.scope(),
                memory=common_pb2.MemoryDraft(content=f"{tag} the new fact"),
                supersedes=[target],
                reason="it changed",
            ),
            metadata=proposer.md,
        )
    ).candidate.id
    (tenant_id,) = brain_server.sql(
        "SELECT DISTINCT tenant_id::text FROM memories WHERE memory_id = $1::uuid", target
    )[0]
    holder = await asyncpg.connect(pg_cluster.owner_dsn)
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            f"memory\x1f{tenant_id}\x1f{target}",
        )
        # The update queues first, the approval (clock already read) second.
        update = asyncio.ensure_future(writer.update(target, ["tags"], tags=["edited"]))
        await waiting_for_advisory_locks(holder, 1)
        approve = asyncio.ensure_future(
            outcome(
                reviewer.review.ReviewCandidate(
                    review_pb2.ReviewCandidateRequest(
                        scope=reviewer.scope(),
                        id=candidate,
                        decision=review_pb2.REVIEW_DECISION_APPROVE,
                        reason="checked",
                    ),
                    metadata=reviewer.md,
                )
            )
        )
        # The update queued above times out after 10 s: let go within 5 s even if the approval
        # has not queued yet on a very busy machine (the race is then merely not provoked).
        await waiting_for_advisory_locks(holder, 2, at_most=5)
        await tx.rollback()
        assert (await update).version == 2
        assert await approve == grpc.StatusCode.OK
    finally:
        await holder.close()
    rows = versions(brain_server, target)
    assert_contiguous(rows)
    assert [r["status"] for r in rows] == ["active", "active", "superseded"]
    assert (await writer.get(candidate)).status == common_pb2.MEMORY_STATUS_ACTIVE


async def test_any_error_on_a_connection_killed_under_a_transaction_is_unavailable(
    pg_cluster: PgCluster,
) -> None:
    """When the backend under a transaction is killed, whatever error surfaces is Unavailable
    (the check ran on the connection after its release and raised InterfaceError instead)."""
    db = await Database.connect(pg_cluster.app_dsn, max_size=1)
    killer = await asyncpg.connect(pg_cluster.owner_dsn)
    try:
        with pytest.raises(Unavailable):
            async with db.tenant_tx(str(uuid.uuid4())) as conn:
                pid = await conn.fetchval("SELECT pg_backend_pid()")
                assert await killer.fetchval("SELECT pg_terminate_backend($1)", pid)
                noticed_by = time.monotonic() + 90  # until the client sees the connection go
                while time.monotonic() < noticed_by:
                    if conn.is_closed():
                        break
                    await asyncio.sleep(0.02)
                raise ValueError("a failure that is not the database's own error")
        # Positive control: an error on a live connection is not mistaken for an outage.
        with pytest.raises(ValueError):
            async with db.tenant_tx(str(uuid.uuid4())):
                raise ValueError("the caller's own failure")
    finally:
        await killer.close()
        await db.close()
