"""The authorization interceptor, key lifecycle, abuse limits and startup refusals."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import asyncpg
import grpc
import pytest

from brain.authz import ALL_PERMISSIONS, METHOD_CLASSES, RateLimiter
from brain.authz.interceptor import PUT_DOCUMENTS_MAX, AuthorizationInterceptor, call_cost
from brain.server.domain.knowledge.documents import MAX_PUT_DOCUMENTS
from brain.server.errors import DeadlineExceeded
from brain.server.runtime.app import StartupError, start_server
from brain.server.storage.db import Database
from brain.v1 import (
    audit_pb2,
    common_pb2,
    graph_pb2,
    identity_pb2,
    knowledge_pb2,
    memory_pb2,
    review_pb2,
)

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api, rpc_error

FULL = ",".join(sorted(ALL_PERMISSIONS))


def test_every_declared_rpc_is_classified() -> None:
    """Every method of every brain.v1 service is in the classification table, and no other."""
    declared = set()
    for module in (memory_pb2, review_pb2, audit_pb2, identity_pb2, knowledge_pb2, graph_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            declared |= {f"/{service.full_name}/{m.name}" for m in service.methods}
    assert declared == set(METHOD_CLASSES)


async def test_every_classified_rpc_is_served(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Each classified method reaches the interceptor (UNAUTHENTICATED without a key) and each
    service reports SERVING on the health service."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from brain.server.runtime.app import SERVICES

    for method in METHOD_CLASSES:
        service, name = method.strip("/").split("/")
        descriptor = next(
            m.DESCRIPTOR.services_by_name[service.split(".")[-1]]
            for m in (memory_pb2, review_pb2, audit_pb2, identity_pb2, knowledge_pb2, graph_pb2)
            if service.split(".")[-1] in m.DESCRIPTOR.services_by_name
        )
        streaming = descriptor.methods_by_name[name].server_streaming
        call = (channel.unary_stream if streaming else channel.unary_unary)(method)
        try:
            result = call(b"")
            if streaming:
                async for _ in result:
                    pass
            else:
                await result
            raise AssertionError(f"{method} answered without a key")
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED, method
    health = health_pb2_grpc.HealthStub(channel)
    for service in SERVICES:
        status = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert status.status == health_pb2.HealthCheckResponse.SERVING
    assert {m.strip("/").split("/")[0] for m in METHOD_CLASSES} == set(SERVICES)


async def test_unknown_method_refused_even_for_a_full_key(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A method outside the API is refused for a key holding every permission."""
    key = brain_server.mint_key(unique("t"), "root", permissions=FULL)
    md = (("authorization", f"Bearer {key}"),)
    call = channel.unary_unary("/brain.v1.MemoryService/DropEverything")
    err = await rpc_error(call(b"", metadata=md))
    assert err.code() == grpc.StatusCode.UNIMPLEMENTED
    assert (await Api(channel, key).whoami()).principal == "root"


async def test_unclassified_served_method_is_refused(
    pg_cluster: PgCluster, brain_server: BrainServer
) -> None:
    """A handler the server serves but the table does not classify never runs, even for root."""
    key = brain_server.mint_key(unique("t"), "root", permissions=FULL)
    db = await Database.connect(pg_cluster.app_dsn)
    ran: list[bytes] = []

    async def secret(request: bytes, context: Any) -> bytes:
        ran.append(request)
        return b"secret"

    handler = grpc.method_handlers_generic_handler(
        "brain.v1.MemoryService",
        {"Backdoor": grpc.unary_unary_rpc_method_handler(secret)},
    )
    server = grpc.aio.server(
        interceptors=[AuthorizationInterceptor(db.lookup_key, pg_cluster.pepper)]
    )
    # Positive control: the same handler under a classified name runs for the same key.
    classified = grpc.method_handlers_generic_handler(
        "brain.v1.IdentityService",
        {
            "WhoAmI": grpc.unary_unary_rpc_method_handler(
                secret, request_deserializer=identity_pb2.WhoAmIRequest.FromString
            )
        },
    )
    server.add_generic_rpc_handlers((handler, classified))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            md = (("authorization", f"Bearer {key}"),)
            call = ch.unary_unary("/brain.v1.MemoryService/Backdoor")
            err = await rpc_error(call(b"x", metadata=md))
            assert err.code() == grpc.StatusCode.UNIMPLEMENTED
            assert ran == []
            assert await ch.unary_unary("/brain.v1.IdentityService/WhoAmI")(b"", metadata=md) == (
                b"secret"
            )
            assert ran == [identity_pb2.WhoAmIRequest()]
    finally:
        await server.stop(0)
        await db.close()


async def test_whoami_reports_the_key(brain_server: BrainServer, channel: grpc.aio.Channel) -> None:
    """WhoAmI returns tenant, principal, permissions, confinement, labels and allowed methods."""
    tenant = unique("t")
    key = brain_server.mint_key(
        tenant, "agent:coder", permissions="memories:read,memories:propose", user="alice",
        namespaces=("assistant", "shared"), session="s1", labels=("team", "eng"),
    )  # fmt: skip
    me = await Api(channel, key).whoami()
    assert (me.tenant_name, me.principal) == (tenant, "agent:coder")
    assert list(me.permissions) == ["memories:propose", "memories:read"]
    assert (me.confinement.user_id, list(me.confinement.namespaces), me.confinement.session_id) == (
        "alice", ["assistant", "shared"], "s1",
    )  # fmt: skip
    assert list(me.labels) == ["eng", "team"]
    assert "/brain.v1.ReviewService/ProposeMemory" in me.allowed_methods
    assert "/brain.v1.MemoryService/SaveMemory" not in me.allowed_methods


async def test_key_lifecycle_through_brain_admin(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Create, list (no secrets), rotate with grace, revoke; last-used time is recorded."""
    tenant = unique("t")
    brain_server.admin("tenants", "create", tenant)
    created = json.loads(
        brain_server.admin(
            "keys", "create", "--tenant", tenant, "--principal", "alice", "--user", "alice",
            "--namespace", "assistant", "--namespace", "shared",
            "--permissions", "memories:read,memories:write", "--labels", "team",
            "--expires-in", "90d", "--json",
        ).stdout
    )  # fmt: skip
    key = created["key"]
    assert created["confinement"]["namespaces"] == ["assistant", "shared"]
    api = Api(channel, key, namespace="assistant", user_id="alice")
    me = await api.whoami()
    assert me.expires_at.ToDatetime(tzinfo=UTC) > datetime.now(UTC)

    listing = brain_server.admin("keys", "list", "--tenant", tenant, "--json").stdout
    secret_part = key.split("_", 2)[2]
    assert created["key_id"] in listing
    assert secret_part[:20] not in listing and "secret_hash" not in listing
    assert json.loads(listing)[0]["last_used_at"] is not None

    rotated = json.loads(
        brain_server.admin("keys", "rotate", created["key_id"], "--grace", "1h", "--json").stdout
    )
    new_api = Api(channel, rotated["key"], namespace="assistant", user_id="alice")
    assert (await new_api.whoami()).principal == "alice"
    assert (await api.whoami()).principal == "alice"  # still inside the grace period
    brain_server.admin("keys", "revoke", created["key_id"])
    err = await rpc_error(api.whoami())
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert (await new_api.whoami()).principal == "alice"

    bad = brain_server.admin("keys", "create", "--tenant", tenant, "--principal", "x",
                             "--permissions", "memories:everything", check=False)  # fmt: skip
    assert bad.returncode == 2 and "unknown permission" in bad.stderr


async def test_rate_limit_per_key(pg_cluster: PgCluster, loop_thread: LoopThread) -> None:
    """A key past its burst gets RESOURCE_EXHAUSTED with a retry delay; other keys go on."""
    server = BrainServer(
        cluster=pg_cluster, loop=loop_thread,
        settings=server_settings(pg_cluster, rate_limit=0.5, rate_burst=2),
    )  # fmt: skip
    server.start()
    try:
        tenant = unique("t")
        async with server.channel() as ch:
            busy = Api(ch, server.mint_key(tenant, "busy"))
            calm = Api(ch, server.mint_key(tenant, "calm"))
            await busy.whoami()
            await busy.whoami()
            err = await rpc_error(busy.whoami())
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            retry = dict(err.trailing_metadata() or ())
            assert int(retry["retry-after-ms"]) > 0
            assert (await calm.whoami()).principal == "calm"
    finally:
        server.stop()


def test_token_bucket_refills() -> None:
    """The bucket refuses past the burst and refills at the configured rate."""
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=2, clock=lambda: now[0])
    assert [limiter.acquire("k"), limiter.acquire("k")] == [0.0, 0.0]
    assert limiter.acquire("k") == pytest.approx(0.5)
    now[0] += 0.5
    assert limiter.acquire("k") == 0.0
    assert limiter.acquire("other") == 0.0


def test_a_call_can_cost_several_tokens_up_to_the_burst() -> None:
    """A call of cost 3 waits for 3 tokens; a cost over the burst takes the whole (full)
    bucket, so it can always pass; a PutDocuments costs one token per document."""
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=4, clock=lambda: now[0])
    assert limiter.acquire("k", 3) == 0.0
    assert limiter.acquire("k", 3) == pytest.approx(1.0)  # 1 left, 2 more at 2/s
    now[0] += 1.0
    assert limiter.acquire("k", 3) == 0.0
    now[0] += 2.0
    assert limiter.acquire("k", 100) == 0.0  # full: takes all 4
    assert limiter.acquire("k") == pytest.approx(0.5)
    documents = knowledge_pb2.PutDocumentsRequest(
        documents=[knowledge_pb2.PutDocumentsItem(path=f"{n}.md") for n in range(7)]
    )
    assert call_cost("/brain.v1.KnowledgeService/PutDocuments", documents) == 7.0
    assert call_cost("/brain.v1.KnowledgeService/PutDocument", documents) == 1.0
    # Over the cap the call is the caller's mistake: one token, then INVALID_ARGUMENT.
    too_many = knowledge_pb2.PutDocumentsRequest(
        documents=[knowledge_pb2.PutDocumentsItem(path=f"{n}.md") for n in range(101)]
    )
    assert call_cost("/brain.v1.KnowledgeService/PutDocuments", too_many) == 1.0
    assert PUT_DOCUMENTS_MAX == MAX_PUT_DOCUMENTS


async def test_page_and_message_limits(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Oversized pages are INVALID_ARGUMENT naming the field; oversized messages are refused."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    await api.save("limits are fine")
    err = await rpc_error(api.search("limits", limit=101))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "limit" in (err.details() or "")
    assert len(await api.search("limits", limit=100)) == 1
    err = await rpc_error(api.list_all(page_size=1000))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "page_size" in (err.details() or "")
    assert len(await api.list_all(page_size=100)) == 1
    err = await rpc_error(api.save("x" * (5 * 1024 * 1024)))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_statement_timeout_becomes_deadline_exceeded(pg_cluster: PgCluster) -> None:
    """A statement past the transaction's timeout is cancelled in PostgreSQL and reported."""
    db = await Database.connect(pg_cluster.app_dsn)
    try:
        with pytest.raises(DeadlineExceeded):
            async with db.tenant_tx("00000000-0000-0000-0000-000000000000", timeout_ms=50) as conn:
                await conn.execute("SELECT pg_sleep(2)")
        async with db.tenant_tx("00000000-0000-0000-0000-000000000000", timeout_ms=5000) as conn:
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await db.close()


def test_server_refuses_a_role_that_bypasses_rls(
    pg_cluster: PgCluster, loop_thread: LoopThread
) -> None:
    """Pointed at the owner (superuser) role, the server refuses to start and says why."""
    settings = server_settings(pg_cluster, database_url=pg_cluster.owner_dsn)
    with pytest.raises(StartupError, match="row-level security"):
        loop_thread.run(start_server(settings))


def test_server_refuses_an_unmigrated_database(
    pg_cluster: PgCluster, loop_thread: LoopThread
) -> None:
    """An empty database is refused with a pointer to brain-admin migrate."""
    name = unique("empty").replace("-", "_")

    async def create() -> None:
        conn = await asyncpg.connect(pg_cluster.embedded_pg.bootstrap_dsn)
        try:
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()

    loop_thread.run(create())
    url = pg_cluster.embedded_pg.dsn("postgres", name)
    with pytest.raises(StartupError, match="brain-admin migrate"):
        loop_thread.run(start_server(server_settings(pg_cluster, database_url=url)))


async def test_confined_scope_errors_name_the_field(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """PERMISSION_DENIED for scope says which field is missing or outside the key's scope."""
    key = brain_server.mint_key(unique("t"), "a", user="alice", namespaces=("assistant",))
    api = Api(channel, key, namespace="assistant", user_id="alice")
    err = await rpc_error(api.save("x", scope=common_pb2.Scope(namespace="assistant")))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "scope.user_id is required" in (err.details() or "")
    err = await rpc_error(api.save("x", scope=common_pb2.Scope(namespace="ops", user_id="alice")))
    assert "scope.namespace is outside" in (err.details() or "")
    assert (await api.save("allowed")).memory.scope.user_id == "alice"


def test_server_refuses_an_embedder_of_another_dimension(
    pg_cluster: PgCluster, loop_thread: LoopThread
) -> None:
    """An embedder whose vectors do not fit the schema's column is refused at start."""
    settings = server_settings(
        pg_cluster, embedder="openai", openai_url="http://127.0.0.1:9", openai_model="m",
        embedding_dimension=768,
    )  # fmt: skip
    with pytest.raises(StartupError, match="set-dimension 768"):
        loop_thread.run(start_server(settings))
