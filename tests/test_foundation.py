"""The first vertical slice: save, get and lexical search over real gRPC and PostgreSQL."""

from __future__ import annotations

import asyncpg
import grpc
import pytest

from brain.authz import Confinement, format_key, new_key_id, new_secret, parse_permissions
from brain.server.storage import admin
from brain.v1 import common_pb2, identity_pb2, identity_pb2_grpc, memory_pb2, memory_pb2_grpc

from .conftest import BrainServer, unique


def md(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


async def test_save_get_search_roundtrip(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A saved memory comes back by id and by a lexical search for its words."""
    key = brain_server.mint_key(unique("t"), "alice")
    stub = memory_pb2_grpc.MemoryServiceStub(channel)
    scope = common_pb2.Scope(namespace="proj")
    saved = await stub.SaveMemory(
        memory_pb2.SaveMemoryRequest(
            scope=scope,
            memory=common_pb2.MemoryDraft(content="The deploy pipeline uses blue-green releases"),
        ),
        metadata=md(key),
    )
    assert saved.outcome == memory_pb2.SAVE_OUTCOME_CREATED
    assert saved.memory.status == common_pb2.MEMORY_STATUS_ACTIVE
    assert saved.memory.created_by == "alice"
    assert list(saved.memory.labels) == ["team"]

    got = await stub.GetMemory(
        memory_pb2.GetMemoryRequest(scope=scope, id=saved.memory.id), metadata=md(key)
    )
    assert got.memory.content == "The deploy pipeline uses blue-green releases"

    found = await stub.SearchMemories(
        memory_pb2.SearchMemoriesRequest(scope=scope, query="deploy releases"), metadata=md(key)
    )
    assert [h.memory.id for h in found.hits] == [saved.memory.id]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("\u200b\u200d\ufeff \u2060", "must not be empty"),  # zero-width only
        ("a\x00b", "NUL"),
        ("x" * (32 * 1024 + 1), "32 KiB"),
    ],
)
async def test_bad_content_is_invalid_argument_and_stores_nothing(
    brain_server: BrainServer, channel: grpc.aio.Channel, content: str, needle: str
) -> None:
    """Empty, NUL-bearing and oversized content is refused with a clear message."""
    tenant = unique("t")
    key = brain_server.mint_key(tenant, "alice")
    stub = memory_pb2_grpc.MemoryServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.SaveMemory(
            memory_pb2.SaveMemoryRequest(
                scope=common_pb2.Scope(namespace="proj"),
                memory=common_pb2.MemoryDraft(content=content),
            ),
            metadata=md(key),
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "memory.content" in (err.value.details() or "")
    assert needle in (err.value.details() or "")
    rows = brain_server.sql(
        "SELECT count(*) FROM memories m JOIN tenants t USING (tenant_id) WHERE t.name = $1", tenant
    )
    assert rows[0][0] == 0
    # Positive control: a valid save in the same tenant is stored.
    await stub.SaveMemory(
        memory_pb2.SaveMemoryRequest(
            scope=common_pb2.Scope(namespace="proj"), memory=common_pb2.MemoryDraft(content="ok")
        ),
        metadata=md(key),
    )
    rows = brain_server.sql(
        "SELECT count(*) FROM memories m JOIN tenants t USING (tenant_id) WHERE t.name = $1", tenant
    )
    assert rows[0][0] == 1


async def test_bad_keys_are_all_the_same_unauthenticated(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Missing, malformed, unknown, expired and revoked keys get one identical answer."""
    tenant = unique("t")
    good = brain_server.mint_key(tenant, "alice")
    expired = brain_server.mint_key(tenant, "bob", expires_in_seconds=-1)
    revoked = brain_server.mint_key(tenant, "carol")
    revoked_id = revoked.split("_")[1]
    brain_server.sql("UPDATE api_keys SET revoked_at = now() WHERE key_id = $1", revoked_id)
    forged = good[:-10] + ("A" if good[-10] != "A" else "B") + good[-9:]
    stub = identity_pb2_grpc.IdentityServiceStub(channel)
    answers = []
    for metadata in [
        (),
        (("authorization", "Bearer"),),
        (("authorization", "Bearer not-a-key"),),
        (("authorization", f"Basic {good}"),),
        md(forged),
        md(expired),
        md(revoked),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.WhoAmI(identity_pb2.WhoAmIRequest(), metadata=metadata)
        answers.append((err.value.code(), err.value.details()))
    assert set(answers) == {
        (grpc.StatusCode.UNAUTHENTICATED, "missing, malformed, unknown, expired or revoked API key")
    }
    me = await stub.WhoAmI(identity_pb2.WhoAmIRequest(), metadata=md(good))
    assert me.principal == "alice"
    assert me.tenant_name == tenant


async def test_a_keys_tenant_entry_routes_its_lookup_and_never_authenticates_alone(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The key-id-to-tenant table (migration 0061, what a Citus coordinator reads instead of
    every shard of api_keys) only routes: an entry whose key row is absent or revoked
    authenticates nothing; no key row exists without its entry naming its tenant; a mint
    that fails leaves no entry behind."""
    tenant = unique("t")
    good = brain_server.mint_key(tenant, "alice")
    revoked = brain_server.mint_key(tenant, "carol")
    brain_server.sql(
        "UPDATE api_keys SET revoked_at = now() WHERE key_id = $1", revoked.split("_")[1]
    )
    stray_id = new_key_id()  # an entry without a key row
    tenant_id = brain_server.sql("SELECT tenant_id FROM tenants WHERE name = $1", tenant)[0][0]
    brain_server.sql(
        "INSERT INTO api_key_tenants (key_id, tenant_id) VALUES ($1, $2)", stray_id, tenant_id
    )
    stub = identity_pb2_grpc.IdentityServiceStub(channel)
    for key in [revoked, format_key(stray_id, new_secret())]:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.WhoAmI(identity_pb2.WhoAmIRequest(), metadata=md(key))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    me = await stub.WhoAmI(identity_pb2.WhoAmIRequest(), metadata=md(good))  # control
    assert (me.principal, me.tenant_name) == ("alice", tenant)
    entries = brain_server.sql(
        "SELECT tenant_id FROM api_key_tenants WHERE key_id = $1", good.split("_")[1]
    )
    assert [r[0] for r in entries] == [tenant_id]

    conn = await asyncpg.connect(brain_server.cluster.owner_dsn)
    refused = []
    try:
        try:  # a key row without its entry
            await conn.execute(
                "INSERT INTO api_keys (tenant_id, key_id, secret_hash, principal, permissions, "
                "labels) VALUES ($1, $2, '', 'x', '{}', '{team}')",
                tenant_id,
                new_key_id(),
            )
        except asyncpg.ForeignKeyViolationError as exc:  # (Citus names the shard's copy)
            refused.append(
                "api_keys_key_tenant_fkey" if "api_keys_key_tenant_fkey" in str(exc) else str(exc)
            )
        before = await conn.fetchval("SELECT count(*) FROM api_key_tenants")
        try:  # no label: api_keys' check refuses it, outside any transaction of the caller
            await admin.mint_key(
                conn, b"p" * 32, tenant=tenant, principal="dave",
                permissions=parse_permissions("memories:read"), confinement=Confinement(),
                labels=frozenset(), expires_at=None,
            )  # fmt: skip
        except asyncpg.CheckViolationError:
            refused.append("labels")
        left = await conn.fetchval("SELECT count(*) FROM api_key_tenants") - before
    finally:
        await conn.close()
    assert refused == ["api_keys_key_tenant_fkey", "labels"]
    assert left == 0  # the failed mint's entry went with it
