"""Reads from a streaming replica, and read-your-writes for the key that just wrote.

Needs a real standby: ``make test-external`` starts one (BRAIN_TEST_READ_DATABASE_URL for
the app role on it, BRAIN_TEST_REPLICA_ADMIN_URL for the owner, who may pause its replay).
Pausing replay freezes the replica, so what a key reads shows where the read ran.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import asyncpg
import grpc
import pytest

from brain.server.runtime.app import start_server

from .conftest import BrainServer, PgCluster, server_settings, unique
from .helpers import Api, rpc_error

READ_URL = os.environ.get("BRAIN_TEST_READ_DATABASE_URL", "")
REPLICA_ADMIN_URL = os.environ.get("BRAIN_TEST_REPLICA_ADMIN_URL", "")
pytestmark = pytest.mark.skipif(
    not (READ_URL and REPLICA_ADMIN_URL), reason="needs a streaming replica (make test-external)"
)


async def on_replica(query: str) -> object:
    conn = await asyncpg.connect(REPLICA_ADMIN_URL)
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    """Wait, generously, for something that must happen; return as soon as it does."""
    for _ in range(600):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the replica never caught up")


async def test_reads_use_the_replica_and_a_writer_reads_its_own_writes(
    brain_server: BrainServer, pg_cluster: PgCluster
) -> None:
    """With replay paused, another key's reads miss a new row (served by the replica) while
    the key that wrote it still reads it (the primary); after resuming, both see it."""
    tenant = unique("replica")
    running = await start_server(
        server_settings(pg_cluster, read_database_url=READ_URL, embedder="none")
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            writer = Api(channel, brain_server.mint_key(tenant, "alice"), namespace="proj")
            reader = Api(channel, brain_server.mint_key(tenant, "bob"), namespace="proj")
            before = (await writer.save("Replicated before the pause")).memory.id

            async def reader_sees(memory_id: str) -> bool:
                try:
                    await reader.get(memory_id)
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.NOT_FOUND
                    return False
                return True

            await eventually(lambda: reader_sees(before))  # the replica serves the reader
            await on_replica("SELECT pg_wal_replay_pause()")
            try:
                await eventually(_is_paused)  # pausing is asynchronous: wait until it holds
                during = (await writer.save("Written while replay is paused")).memory.id
                assert (await writer.get(during)).content == "Written while replay is paused"
                assert during in await writer.search("paused")
                err = await rpc_error(reader.get(during))
                assert err.code() == grpc.StatusCode.NOT_FOUND
                assert (await reader.get(before)).content == "Replicated before the pause"
            finally:
                await on_replica("SELECT pg_wal_replay_resume()")
            await eventually(lambda: reader_sees(during))
    finally:
        await running.stop(grace=0)


async def _is_paused() -> bool:
    return await on_replica("SELECT pg_get_wal_replay_pause_state() = 'paused'") is True
