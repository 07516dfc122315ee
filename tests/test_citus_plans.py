"""On a Citus cluster, every statement a tenant's request sends runs on one shard.

Citus routes a statement to one worker (a router plan: ``Task Count: 1``) only when every
distributed table in it is pinned to one tenant by a condition its planner can read;
row-level security's ``tenant_id = brain_current_tenant()`` is not one. A statement that
is not pinned fans out to every shard: it works, but its cost grows with the cluster, and
Citus refuses shapes there (correlated subqueries, joins off the distribution column)
that it accepts on one shard. This test records what an in-process server sends for
save, search (each lane), get, list, history and build context, then asks ``EXPLAIN`` for
each statement with its own parameters and settings, and fails on any plan with more than
one task. Skipped on plain PostgreSQL (nothing is distributed there): ``make test-citus``
runs it (deploy/SCALING.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from brain.server.storage import db as storage_db
from brain.v1 import memory_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api

# Statements that are not a tenant's, by design (deploy/SCALING.md, "The schema rules"):
# the key lookup by public id runs before the tenant is known, and a key's last use is
# written by that id too (what they read inside: the last test below).
NOT_A_TENANTS = ("brain_lookup_key(", "brain_touch_key(")
PLANNED = re.compile(r"^\s*(WITH|SELECT|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
TASKS = re.compile(r"Task Count: (\d+)")
# The server's per-connection set-up (its type codecs), before the recorder wraps it.
SERVER_INIT = storage_db._init_connection


@dataclass
class Sent:
    query: str
    args: tuple[Any, ...]
    settings: str  # the SET LOCAL batch of its transaction ('' outside one)


class Recorder:
    """What the server's connections send, with the settings batch each ran under."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self._batch: dict[int, str] = {}

    def attach(self, conn: asyncpg.Connection) -> None:
        conn.add_query_logger(lambda record: self.log(id(conn), record))

    def log(self, conn: int, record: Any) -> None:
        query = record.query
        if "SET LOCAL" in query and not record.args:
            self._batch[conn] = query
        elif PLANNED.match(query) and ";" not in query.strip().rstrip(";"):
            # (A string of several commands is the pool's reset, not a request's.)
            self.sent.append(Sent(query, tuple(record.args or ()), self._batch.get(conn, "")))


@pytest.fixture(scope="module")
def recording_server(
    pg_cluster: PgCluster, loop_thread: LoopThread
) -> Iterator[tuple[BrainServer, Recorder]]:
    """An in-process server on the deployment's database whose connections log queries."""
    probe = loop_thread.run(_has_citus(pg_cluster.app_dsn))
    if not probe:
        pytest.skip("needs a Citus cluster (make test-citus): plain PostgreSQL has no shards")
    recorder = Recorder()

    async def init(conn: asyncpg.Connection) -> None:
        await SERVER_INIT(conn)
        recorder.attach(conn)

    storage_db._init_connection = init  # type: ignore[assignment]
    server = BrainServer(cluster=pg_cluster, loop=loop_thread, settings=server_settings(pg_cluster))
    try:
        server.start()
        yield server, recorder
        server.stop()
    finally:
        storage_db._init_connection = SERVER_INIT  # type: ignore[assignment]


async def _has_citus(dsn: str) -> bool:
    conn = await asyncpg.connect(dsn)
    try:
        return bool(
            await conn.fetchval("SELECT count(*) FROM pg_extension WHERE extname = 'citus'")
        )
    finally:
        await conn.close()


async def _plans(dsn: str, sent: list[Sent]) -> list[tuple[Sent, str]]:
    """EXPLAIN of each statement, in a transaction carrying its settings, rolled back."""
    out = []
    conn = await asyncpg.connect(dsn)
    await SERVER_INIT(conn)
    try:
        for s in sent:
            tx = conn.transaction()
            await tx.start()
            try:
                if s.settings:
                    await conn.execute(s.settings)
                try:
                    rows = await conn.fetch("EXPLAIN " + s.query, *s.args)
                except asyncpg.PostgresError as e:
                    raise AssertionError(f"EXPLAIN {s.query!r} {s.args!r}: {e}") from e
                out.append((s, "\n".join(r[0] for r in rows)))
            finally:
                await tx.rollback()
    finally:
        await conn.close()
    return out


async def test_a_tenants_hot_statements_are_router_plans(
    recording_server: tuple[BrainServer, Recorder], pg_cluster: PgCluster
) -> None:
    server, recorder = recording_server
    tenant = unique("router")
    key = server.mint_key(
        tenant, "alice", permissions="memories:read,memories:write,memories:forget"
    )
    async with server.channel() as channel:
        api = Api(channel, key)
        recorder.sent.clear()
        saved = await api.save("the deploy pipeline runs on Fridays", tags=["ops"])
        await api.save("the pipeline owner is Dana", tags=["ops"])
        memory_id = saved.memory.id
        await api.get(memory_id)
        await api.history(memory_id)
        assert len(await api.list_all()) == 2
        for mode in (
            memory_pb2.SEARCH_MODE_LEXICAL,
            memory_pb2.SEARCH_MODE_SEMANTIC,
            memory_pb2.SEARCH_MODE_HYBRID,
        ):
            found = await api.search("pipeline Fridays", mode=mode, min_relevance=0)
            assert memory_id in found, mode
        context = await api.memories.BuildContext(
            memory_pb2.BuildContextRequest(scope=api.scope(), query="pipeline", min_relevance=0),
            metadata=api.md,
        )
        assert context.items
        updated = await api.update(memory_id, ["content"], content="the pipeline runs on Mondays")
        assert updated.version == 2
        assert (await api.forget(memory_id)).id == memory_id
    sent = [s for s in recorder.sent if not any(n in s.query for n in NOT_A_TENANTS)]
    assert sent, "the recorder saw no statement"
    plans = await _plans(pg_cluster.app_dsn, sent)
    routed = [p for _, p in plans if TASKS.search(p)]
    # Controls: the recorder's statements reach distributed tables (a plan with tasks), and
    # the same reading finds a statement not pinned to the tenant (row-level security
    # still limits it to the tenant's rows) on every shard.
    assert routed, "no statement was planned by Citus"
    unpinned = Sent("SELECT count(*) FROM memories", (), sent[-1].settings)
    [(_, plan)] = await _plans(pg_cluster.app_dsn, [unpinned])
    assert max(int(n) for n in TASKS.findall(plan)) > 1, plan
    fanned = [
        f"{max(int(n) for n in TASKS.findall(plan))} tasks: {' '.join(s.query.split())[:300]}"
        for s, plan in plans
        if any(int(n) > 1 for n in TASKS.findall(plan))
    ]
    assert not fanned, "multi-shard plans:\n" + "\n".join(fanned)


async def test_the_key_lookup_reads_one_shard_of_api_keys(
    recording_server: tuple[BrainServer, Recorder], pg_cluster: PgCluster
) -> None:
    """brain_lookup_key and brain_touch_key find the key's tenant in the reference table
    api_key_tenants (migration 0061), then read one shard of api_keys; the lookup by key id
    alone, as before, reads every shard (the control). Counted from the commands Citus
    sends to the workers (``citus.log_remote_commands``), as the owner, whose functions
    these are (the function call itself is not a plan EXPLAIN can open)."""
    server, _ = recording_server
    key_id = server.mint_key(unique("lookup"), "alice").split("_")[1]
    conn = await asyncpg.connect(pg_cluster.owner_dsn)
    logged: list[str] = []
    conn.add_log_listener(lambda _, message: logged.append(str(message)))

    async def shards(query: str) -> set[str]:
        logged.clear()
        async with conn.transaction():
            await conn.execute("SET LOCAL citus.log_remote_commands = on")
            await conn.execute("SET LOCAL client_min_messages = log")
            await conn.fetch(query, key_id)
        return set(re.findall(r"\bapi_keys_\d+\b", " ".join(logged)))

    try:
        found = await shards("SELECT * FROM brain_lookup_key($1)")
        touched = await shards("SELECT brain_touch_key($1)")
        fanned = await shards("SELECT key_id FROM api_keys WHERE key_id = $1")
        row = await conn.fetchrow("SELECT * FROM brain_lookup_key($1)", key_id)
    finally:
        await conn.close()
    assert row is not None and row["key_id"] == key_id
    assert len(found) == 1 and len(touched) <= 1, (found, touched)
    assert len(fanned) > 1, fanned  # the control: by key id alone, every shard
