"""Isolation on every read path, with and without the application's visibility filter.

The second run switches the SQL visibility predicate off, so only PostgreSQL row-level
security stands between the keys: the results must not change. Every negative check sits
beside a positive one in the same test, so an empty retriever cannot pass.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from brain.v1 import common_pb2, memory_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api, rpc_error

NS = "assistant"
TAGGED = common_pb2.MemoryFilter(tags=["iso"])


@pytest.fixture(scope="module", params=["app-filter", "rls-only"])
def server(
    request: pytest.FixtureRequest,
    brain_server: BrainServer,
    pg_cluster: PgCluster,
    loop_thread: LoopThread,
) -> Iterator[BrainServer]:
    if request.param == "app-filter":
        yield brain_server
        return
    rls_only = BrainServer(
        cluster=pg_cluster,
        loop=loop_thread,
        settings=server_settings(pg_cluster, app_filter=False),
    )
    rls_only.start()
    yield rls_only
    rls_only.stop()


async def visible_everywhere(api: Api) -> dict[str, set[str]]:
    """The ids each collection read path returns for the world rows."""
    search = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(scope=api.scope(), query="isolation", filter=TAGGED),
        metadata=api.md,
    )
    listed = await api.memories.ListMemories(
        memory_pb2.ListMemoriesRequest(scope=api.scope(), filter=TAGGED), metadata=api.md
    )
    exported = [
        item.memory.id
        async for item in api.memories.ExportMemories(
            memory_pb2.ExportMemoriesRequest(
                scope=api.scope(), filter=TAGGED, include_history=True
            ),
            metadata=api.md,
        )
    ]
    context = await api.memories.BuildContext(
        memory_pb2.BuildContextRequest(scope=api.scope(), query="isolation", filter=TAGGED),
        metadata=api.md,
    )
    return {
        "search": {h.memory.id for h in search.hits},
        "list": {m.id for m in listed.memories},
        "export": set(exported),
        "context": {i.id for i in context.items},
    }


async def test_every_read_path_stays_in_scope(server: BrainServer) -> None:
    """Confined and foreign-tenant keys see exactly their rows on Get, Search, List, History,
    Export and BuildContext."""
    tenant_a, tenant_b = unique("iso-a"), unique("iso-b")
    async with server.channel() as channel:
        owner = Api(
            channel,
            server.mint_key(
                tenant_a, "owner", permissions="memories:read,memories:write", labels=("team", "hr")
            ),
            namespace=NS,
        )
        alice = Api(
            channel,
            server.mint_key(tenant_a, "alice-agent", user="alice", namespaces=(NS,)),
            namespace=NS,
            user_id="alice",
        )
        other_tenant = Api(channel, server.mint_key(tenant_b, "b"), namespace=NS, user_id="alice")

        async def put(api: Api, text: str, **scope: str) -> str:
            saved = await api.save(
                f"isolation {text}",
                scope=common_pb2.Scope(**scope),
                tags=["iso"],
                labels=["hr"] if text == "hr" else [],
            )
            return saved.memory.id

        rows = {
            "alice": await put(owner, "alice", namespace=NS, user_id="alice"),
            "team": await put(owner, "team", namespace=NS),
            "bob": await put(owner, "bob", namespace=NS, user_id="bob"),
            "ops": await put(owner, "ops", namespace="ops", user_id="alice"),
            "hr": await put(owner, "hr", namespace=NS, user_id="alice"),
            "alice_session": await put(
                owner, "sess", namespace=NS, user_id="alice", session_id="s1"
            ),
            "b": await put(other_tenant, "b", namespace=NS, user_id="alice"),
        }
        await owner.update(
            rows["alice"], ["tags", "content"], content="isolation alice v2", tags=["iso"]
        )

        expected_alice = {rows["alice"], rows["team"], rows["alice_session"]}
        for path, ids in (await visible_everywhere(alice)).items():
            assert ids == expected_alice, path
        for path, ids in (await visible_everywhere(other_tenant)).items():
            assert ids == {rows["b"]}, path

        for name in ("alice", "team"):
            assert (await alice.get(rows[name])).id == rows[name]
            assert (await alice.history(rows[name]))[0].version == 1
        for name in ("bob", "ops", "hr", "b"):
            for read in (alice.get, alice.history):
                err = await rpc_error(read(rows[name]))
                assert err.code() == grpc.StatusCode.NOT_FOUND, name
        assert (await other_tenant.get(rows["b"])).id == rows["b"]
        err = await rpc_error(other_tenant.get(rows["alice"]))
        assert err.code() == grpc.StatusCode.NOT_FOUND


async def test_writes_by_id_stay_in_scope(server: BrainServer) -> None:
    """Update, forget and supersede of an invisible row change nothing; of an own row they work."""
    tenant = unique("iso-w")
    async with server.channel() as channel:
        owner = Api(
            channel,
            server.mint_key(
                tenant, "owner", permissions="memories:read,memories:write,memories:forget"
            ),
            namespace=NS,
        )
        alice = Api(
            channel,
            server.mint_key(
                tenant,
                "alice-agent",
                user="alice",
                namespaces=(NS,),
                permissions="memories:read,memories:write,memories:forget",
            ),
            namespace=NS,
            user_id="alice",
        )
        bob_row = (
            await owner.save("bob's plan", scope=common_pb2.Scope(namespace=NS, user_id="bob"))
        ).memory
        mine = (await alice.save("alice's plan")).memory
        for attempt in (
            alice.update(bob_row.id, ["content"], content="hijacked"),
            alice.forget(bob_row.id),
            alice.save("replacement", supersedes=[bob_row.id]),
        ):
            err = await rpc_error(attempt)
            assert err.code() == grpc.StatusCode.NOT_FOUND
        untouched = await owner.get(bob_row.id)
        assert (untouched.content, untouched.version, untouched.status) == (
            "bob's plan",
            1,
            common_pb2.MEMORY_STATUS_ACTIVE,
        )
        assert (await alice.update(mine.id, ["content"], content="alice's new plan")).version == 2
        final = (await alice.save("alice's final plan", supersedes=[mine.id])).memory
        assert final.supersedes == [mine.id]
        assert (await alice.forget(final.id)).tombstone_id


def test_app_role_cannot_read_key_hashes(pg_cluster: PgCluster, loop_thread: LoopThread) -> None:
    """The server's role reads keys only through the lookup function, never the table."""
    import asyncpg

    async def probe() -> tuple[list[str], int]:
        conn = await asyncpg.connect(pg_cluster.app_dsn)
        try:
            denied = []
            # Nor which tenant holds which key id (migration 0061).
            for query in ["SELECT secret_hash FROM api_keys", "SELECT * FROM api_key_tenants"]:
                try:
                    await conn.fetch(query)
                except asyncpg.InsufficientPrivilegeError as exc:
                    denied.append(str(exc))
            allowed = await conn.fetchval("SELECT count(*) FROM tenants")  # positive control
            return denied, allowed
        finally:
            await conn.close()

    denied, allowed = loop_thread.run(probe())
    assert len(denied) == 2 and all("permission denied" in d for d in denied), denied
    assert allowed == 0  # no tenant set in this session: RLS shows none, but the grant works
