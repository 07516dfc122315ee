"""The audit log: trigger-written hash chains, ListAuditEvents, brain-admin audit."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from brain.server.admin import registry
from brain.v1 import audit_pb2, audit_pb2_grpc, common_pb2, memory_pb2, memory_pb2_grpc

from .conftest import BrainServer, unique
from .helpers import Api
from .zygote import run_module

SAVE = "/brain.v1.MemoryService/SaveMemory"


def md(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


async def save(channel: grpc.aio.Channel, key: str, content: str, **scope: str) -> str:
    scope.setdefault("namespace", "proj")
    response = await memory_pb2_grpc.MemoryServiceStub(channel).SaveMemory(
        memory_pb2.SaveMemoryRequest(
            scope=common_pb2.Scope(**scope), memory=common_pb2.MemoryDraft(content=content)
        ),
        metadata=md(key),
    )
    return str(response.memory.id)


async def list_events(
    channel: grpc.aio.Channel, key: str, **kwargs: Any
) -> audit_pb2.ListAuditEventsResponse:
    stub = audit_pb2_grpc.AuditServiceStub(channel)
    return await stub.ListAuditEvents(
        audit_pb2.ListAuditEventsRequest(scope=common_pb2.Scope(namespace="proj"), **kwargs),
        metadata=md(key),
    )


def admin(server: BrainServer, *args: str) -> subprocess.CompletedProcess[str]:
    """Run brain-admin against the test cluster as its owner, in a process of its own."""
    return run_module(
        "brain.server.admin.main",
        "--database-url", server.cluster.owner_dsn,
        "--pepper-file", str(server.cluster.pepper_file),
        *args,
        timeout=60,
    )  # fmt: skip


def verify(server: BrainServer, tenant: str, *extra: str) -> tuple[int, dict[str, Any]]:
    done = admin(server, "audit", "verify", "--tenant", tenant, "--json", *extra)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)[0]


def tamper(server: BrainServer, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Change audit rows behind the server's back, as an owner with bad intent would:
    switch the append-only guard off, write, switch it on again — in one transaction."""

    async def run() -> None:
        conn = await asyncpg.connect(server.cluster.owner_dsn)
        try:
            async with conn.transaction():
                await conn.execute(
                    "ALTER TABLE audit_events DISABLE TRIGGER audit_events_append_only"
                )
                for query, args in statements:
                    await conn.execute(query, *args)
                await conn.execute(
                    "ALTER TABLE audit_events ENABLE TRIGGER audit_events_append_only"
                )
        finally:
            await conn.close()

    server.loop.run(run())


def tenant_id(server: BrainServer, name: str) -> str:
    return str(server.sql("SELECT tenant_id FROM tenants WHERE name = $1", name)[0][0])


async def test_save_writes_one_chained_event_without_content(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A save appends one event naming key, principal, method and id — never the content."""
    tenant = unique("t")
    key = brain_server.mint_key(
        tenant, "alice", permissions="memories:read,memories:write,audit:read,audit:chain"
    )
    secret = "the vault combination is 12-34-56"
    memory_id = await save(channel, key, secret)

    page = await list_events(channel, key)
    saves = [e for e in page.events if e.method == SAVE]
    assert len(saves) == 1
    event = saves[0]
    assert list(event.memory_ids) == [memory_id]
    assert (event.principal, event.outcome) == ("alice", "save")
    assert event.key_id == key.split("_")[1]
    assert event.seq == page.events[-1].seq and event.prev_hash == page.events[-2].hash
    rows = brain_server.sql(
        "SELECT e::text AS row FROM audit_events e WHERE tenant_id = $1::uuid",
        tenant_id(brain_server, tenant),
    )
    assert rows and not any("vault" in r["row"] for r in rows)
    code, report = verify(brain_server, tenant)
    assert (code, report["ok"], report["events"]) == (0, True, event.seq)


async def test_list_audit_events_shows_own_tenant_only(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """ListAuditEvents pages through the caller's tenant and never shows another's events."""
    perms = "memories:read,memories:write,audit:read"
    key_a = brain_server.mint_key(unique("ta"), "alice", permissions=perms)
    key_b = brain_server.mint_key(unique("tb"), "bob", permissions=perms)
    ids_a = [await save(channel, key_a, f"fact a{i}") for i in range(3)]
    id_b = await save(channel, key_b, "fact b")

    seen_a: list[str] = []
    token = ""
    while True:
        page = await list_events(channel, key_a, page_size=2, page_token=token)
        assert len(page.events) <= 2
        seen_a += [m for e in page.events for m in e.memory_ids]
        token = page.next_page_token
        if not token:
            break
    assert seen_a == ids_a
    assert id_b not in seen_a
    seen_b = [m for e in (await list_events(channel, key_b)).events for m in e.memory_ids]
    assert seen_b == [id_b]
    # Filters: by memory id (even another tenant's id finds nothing), by principal.
    only = await list_events(channel, key_a, memory_id=ids_a[1])
    assert [list(e.memory_ids) for e in only.events] == [[ids_a[1]]]
    assert not (await list_events(channel, key_a, memory_id=id_b)).events
    assert {e.principal for e in (await list_events(channel, key_a, principal="alice")).events} == {
        "alice"
    }


async def test_list_audit_events_needs_audit_read_and_sane_page_size(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Without audit:read the RPC is refused; page_size above 100 is INVALID_ARGUMENT."""
    tenant = unique("t")
    writer = brain_server.mint_key(tenant, "alice")
    auditor = brain_server.mint_key(tenant, "carol", permissions="audit:read")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await list_events(channel, writer)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await list_events(channel, auditor, page_size=101)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (await list_events(channel, auditor, page_size=100)).events


@pytest.mark.parametrize("how", ["update", "delete"])
async def test_verify_names_the_event_changed_in_sql(
    brain_server: BrainServer, channel: grpc.aio.Channel, how: str
) -> None:
    """An UPDATE or DELETE of an audit row made directly in SQL breaks verify at that seq."""
    tenant = unique("t")
    key = brain_server.mint_key(tenant, "alice")
    for i in range(4):
        await save(channel, key, f"fact {i}")
    tid = tenant_id(brain_server, tenant)
    code, report = verify(brain_server, tenant)
    assert (code, report["ok"]) == (0, True)  # positive control: the untouched chain holds
    # The append-only guard refuses a plain change even from the owner.
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        brain_server.sql("DELETE FROM audit_events WHERE tenant_id = $1::uuid", tid)

    target = report["events"] - 2
    if how == "update":
        query = "UPDATE audit_events SET principal = 'mallory' WHERE tenant_id = $1 AND seq = $2"
    else:
        query = "DELETE FROM audit_events WHERE tenant_id = $1 AND seq = $2"
    tamper(brain_server, (query, (tid, target)))

    code, report = verify(brain_server, tenant)
    assert code == 1
    assert report["ok"] is False
    assert report["first_broken_seq"] == target
    assert ("changed" if how == "update" else "missing") in report["reason"]
    text = admin(brain_server, "audit", "verify", "--tenant", tenant)
    assert text.returncode == 1 and f"BROKEN at seq {target}" in text.stdout


async def test_verify_notices_events_cut_from_the_end(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Deleting the newest events is caught by the head the chain is anchored to."""
    tenant = unique("t")
    key = brain_server.mint_key(tenant, "alice")
    for i in range(3):
        await save(channel, key, f"fact {i}")
    tid = tenant_id(brain_server, tenant)
    last = verify(brain_server, tenant)[1]["events"]
    tamper(
        brain_server, ("DELETE FROM audit_events WHERE tenant_id = $1 AND seq = $2", (tid, last))
    )
    code, report = verify(brain_server, tenant)
    assert (code, report["first_broken_seq"]) == (1, last)


async def test_concurrent_burst_leaves_an_unbroken_chain(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Fifty concurrent saves in one tenant give fifty events with gapless seqs and valid hashes.

    All fifty are in flight at once on PostgreSQL (the server's pool lets ten at a time
    race for the tenant's chain). On a Citus coordinator every statement is a round trip to
    a worker, and the tenant's chain serialises the saves: fifty at once outlast the
    server's call limit there (deploy/SCALING.md, item 10), so eight are in flight at a
    time, still racing for the chain: the same fifty events must come out gapless."""
    tenant = unique("t")
    key = brain_server.mint_key(tenant, "alice")
    before = verify(brain_server, tenant)[1]["events"]
    citus = brain_server.sql("SELECT count(*) FROM pg_extension WHERE extname = 'citus'")[0][0]
    in_flight = asyncio.Semaphore(8 if citus else 50)
    racing, most = 0, 0

    async def one(i: int) -> str:
        nonlocal racing, most
        async with in_flight:
            racing += 1
            most = max(most, racing)
            try:
                return await save(channel, key, f"burst fact {i}")
            finally:
                racing -= 1

    ids = await asyncio.gather(*(one(i) for i in range(50)))
    assert most == (8 if citus else 50)  # they did race
    rows = brain_server.sql(
        "SELECT seq, method, memory_ids FROM audit_events WHERE tenant_id = $1::uuid ORDER BY seq",
        tenant_id(brain_server, tenant),
    )
    assert [r["seq"] for r in rows] == list(range(1, before + 51))
    burst = rows[before:]
    assert all(r["method"] == SAVE for r in burst)
    assert sorted(str(r["memory_ids"][0]) for r in burst) == sorted(ids)
    code, report = verify(brain_server, tenant)
    assert (code, report["ok"], report["events"]) == (0, True, before + 50)


async def test_checkpoint_is_signed_and_catches_a_rewritten_chain(
    brain_server: BrainServer, channel: grpc.aio.Channel, tmp_path: Path
) -> None:
    """A signed checkpoint verifies; rewriting history with fresh hashes fools the chain
    walk but not the checkpoint, and an edited checkpoint file is rejected."""
    tenant = unique("t")
    key = brain_server.mint_key(tenant, "alice")
    for i in range(3):
        await save(channel, key, f"fact {i}")
    signing = tmp_path / "audit.key"
    done = admin(brain_server, "audit", "keygen", "--out", str(signing))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(os.stat(signing).st_mode) == 0o600
    assert (tmp_path / "audit.key.pub").exists()
    checkpoint = tmp_path / "checkpoint.json"
    done = admin(
        brain_server, "audit", "checkpoint", "--tenant", tenant, "--key", str(signing),
        "--out", str(checkpoint),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    signed = json.loads(checkpoint.read_text())
    pin = ("--checkpoint", str(checkpoint), "--public-key", str(tmp_path / "audit.key.pub"))
    code, report = verify(brain_server, tenant, *pin)
    assert (code, report["ok"]) == (0, True)
    assert report["checkpoint"].startswith(f"seq {signed['seq']} ")

    # Rewrite event 2 and re-hash everything after it, head included: a consistent forgery.
    tid = tenant_id(brain_server, tenant)
    tamper(
        brain_server,
        ("UPDATE audit_events SET principal = 'mallory' WHERE tenant_id = $1 AND seq = 2", (tid,)),
        (SET_REHASH_TENANT, (tid,)),
        (REHASH, ()),
    )
    code, report = verify(brain_server, tenant)
    assert (code, report["ok"]) == (0, True)  # the walk alone cannot tell
    code, report = verify(brain_server, tenant, *pin)
    assert code == 1
    assert report["first_broken_seq"] == signed["seq"]
    assert "rewritten" in report["reason"]

    forged = {**signed, "seq": signed["seq"] - 1}
    checkpoint.write_text(json.dumps(forged))
    done = admin(brain_server, "audit", "verify", "--tenant", tenant, *pin)
    assert done.returncode == 1 and "invalid signature" in done.stderr


# Recompute every hash from the start with the database's own canonical form.
REHASH = """
DO $$
DECLARE
    r record;
    prev bytea := decode(repeat('00', 32), 'hex');
    h bytea;
    tid uuid := current_setting('brain.rehash_tenant')::uuid;
BEGIN
    FOR r IN SELECT * FROM audit_events WHERE tenant_id = tid ORDER BY seq LOOP
        h := sha256(prev || brain_audit_canonical(r.tenant_id, r.seq, r.at, r.key_id,
                                                  r.principal, r.method, r.memory_ids, r.outcome));
        UPDATE audit_events SET prev_hash = prev, hash = h WHERE tenant_id = tid AND seq = r.seq;
        prev := h;
    END LOOP;
    UPDATE audit_heads SET hash = prev WHERE tenant_id = tid;
END
$$"""
SET_REHASH_TENANT = "SELECT set_config('brain.rehash_tenant', $1::text, true)"


async def test_admin_key_events_name_the_admin(brain_server: BrainServer) -> None:
    """Tenant creation, a quota, key minting, rotation and revocation, and a namespace policy
    change by the brain-admin CLI are chained events by admin:<os user> (set with SET LOCAL
    in each write's transaction, which Citus carries to the workers); a key's last-used touch
    is not an event. A write on an owner connection outside such a transaction names the
    database role: the setting ends with its transaction."""
    tenant = unique("t")

    def run(*args: str) -> Any:
        done = admin(brain_server, *args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    tenant_id = run("tenants", "create", tenant)["tenant_id"]
    run("tenants", "set-quota", tenant, "--memories", "10")
    first = run("keys", "create", "--tenant", tenant, "--principal", "alice")["key_id"]
    brain_server.sql("SELECT brain_touch_key($1)", first)
    second = run("keys", "rotate", first, "--grace", "1h")["key_id"]
    run("keys", "revoke", second)
    run("namespaces", "set", "proj", "--tenant", tenant, "--review-required")
    rows = brain_server.sql(
        """SELECT seq, key_id, principal, method, outcome FROM audit_events
           WHERE tenant_id = $1::uuid ORDER BY seq""",
        tenant_id,
    )
    assert [(r["seq"], r["method"], r["key_id"]) for r in rows] == [
        (1, "admin.tenants.create", ""),
        (2, "admin.tenants.set_quota", ""),
        (3, "admin.keys.create", first),
        (4, "admin.keys.rotate", second),
        (5, "admin.keys.revoke", first),  # the old key ends after the grace period
        (6, "admin.keys.revoke", second),
        (7, "admin.namespaces.set", ""),
    ]
    assert {r["principal"] for r in rows} == {registry.admin_principal()}
    assert rows[6]["outcome"].startswith("namespace proj: review_required=true")

    conn = await asyncpg.connect(brain_server.cluster.owner_dsn)
    try:
        async with registry.acting(conn):
            await conn.execute(
                "INSERT INTO namespace_policies (tenant_id, namespace) VALUES ($1::uuid, 'a')",
                tenant_id,
            )
        await conn.execute(
            "INSERT INTO namespace_policies (tenant_id, namespace) VALUES ($1::uuid, 'b')",
            tenant_id,
        )
        role = await conn.fetchval("SELECT session_user")
        after = await conn.fetch(
            """SELECT principal FROM audit_events WHERE tenant_id = $1::uuid AND seq > 7
               ORDER BY seq""",
            tenant_id,
        )
    finally:
        await conn.close()
    assert [r["principal"] for r in after] == [registry.admin_principal(), f"db:{role}"]
    code, report = verify(brain_server, tenant)
    assert (code, report["events"]) == (0, 9)


async def test_each_lifecycle_rpc_is_one_event_naming_every_memory_it_changed(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Save, supersede, update and forget each append exactly one event with its ids."""
    tenant = unique("t")
    key = brain_server.mint_key(
        tenant,
        "alice",
        permissions="memories:read,memories:write,memories:forget,audit:read,audit:chain",
    )
    api = Api(channel, key)
    old = (await api.save("Deploys happen on Friday")).memory.id
    new = (await api.save("Deploys happen on Thursday", supersedes=[old])).memory.id
    await api.update(new, ["importance"], importance=0.9)
    await api.forget(new)
    events = [e for e in (await list_events(channel, key)).events if e.memory_ids]
    service = "/brain.v1.MemoryService/"
    assert [(e.method, list(e.memory_ids), e.outcome) for e in events] == [
        (service + "SaveMemory", [old], "save"),
        (service + "SaveMemory", [new, old], "save,supersede"),
        (service + "UpdateMemory", [new], "update"),
        # Forgetting the replacement reopens what it replaced for review (issue 30).
        (service + "ForgetMemory", [new, old], "erase,forget,reopen"),
    ]
    assert (await list_events(channel, key, memory_id=old)).events[-1].seq == events[3].seq
    assert verify(brain_server, tenant)[0] == 0
