"""What tests/citus.sh checks on a Citus cluster, beside the pytest suites it may run.

Usage: citus_checks.py OWNER_DSN APP_DSN (the coordinator, database distributed by
deploy/citus/distribute.sql). Each check prints one line and exits non-zero on failure;
each has a control that shows what it guards against.

1. Request settings by SET LOCAL reach the workers, set_config does not.
2. A write transaction over two workers, with the audit triggers on both, commits; with
   the NOTIFY the audit trigger sent before migration 0033 it cannot (PREPARE fails).
   The server's own NOTIFY, sent apart from its SET LOCAL settings (storage/db.py
   notify_apart), runs on the coordinator only; in the settings' string Citus replays it
   on every worker the transaction reaches (heard there: the control).
3. Citus refuses DDL on a distributed table in a multi-statement string, one statement at a
   time it is accepted (why migrate splits).
4. The chunk filler's claim takes due chunks of tenants on two workers; the claim of
   migration 0035 (one locking read over every tenant) cannot run.
"""

from __future__ import annotations

import asyncio
import re
import sys
import uuid
from pathlib import Path

import asyncpg

from brain.server.storage import setlocal
from brain.server.storage.audit import NOTIFY_CHANNEL
from brain.server.storage.db import Database

MIGRATIONS = Path(__file__).resolve().parent.parent / "server" / "storage" / "migrations"
INSERT_MEMORY = """
    INSERT INTO memories (tenant_id, memory_id, version, namespace, content, labels, status,
                          valid_from, created_by, changed_by, changed_by_key, change)
    VALUES ($1, $2, 1, 'citus', $3, '{team}', 'active', now(), 'citus', 'citus', 'citus',
            'save')"""


def ok(what: str) -> None:
    print(f"citus check: ok: {what}", flush=True)


async def tenants_on_two_workers(owner: asyncpg.Connection) -> list[str]:
    """Make tenants until two of them live on different workers; one memory each."""
    by_node: dict[int, str] = {}
    while len(by_node) < 2:
        tenant = str(uuid.uuid4())
        await owner.execute(
            "INSERT INTO tenants (tenant_id, name) VALUES ($1, $2)", tenant, f"citus-{tenant}"
        )
        port = await owner.fetchval(
            """SELECT nodeport FROM pg_dist_shard_placement
               WHERE shardid = get_shard_id_for_distribution_column('memories', $1::uuid)""",
            tenant,
        )
        by_node.setdefault(port, tenant)
    tenants = list(by_node.values())
    for tenant in tenants:
        await owner.execute(INSERT_MEMORY, tenant, uuid.uuid4(), "one")
    return tenants


async def check_settings(app_dsn: str, tenants: list[str]) -> None:
    app = await asyncpg.connect(app_dsn)
    try:
        for tenant in tenants:
            async with app.transaction():
                await app.execute(
                    "SELECT set_config('brain.tenant_id', $1, true), "
                    "set_config('brain.labels', '{\"team\"}', true)",
                    tenant,
                )
                via_set_config = await app.fetchval(
                    "SELECT count(*) FROM memories WHERE tenant_id = $1", tenant
                )
            async with app.transaction():
                await setlocal.set_local(
                    app, {"brain.tenant_id": tenant, "brain.labels": '{"team"}'}
                )
                routed = await app.fetchval(
                    "SELECT count(*) FROM memories WHERE tenant_id = $1", tenant
                )
                every_shard = await app.fetchval("SELECT count(*) FROM memories")
            assert via_set_config == 0, via_set_config  # the control: what broke before
            assert routed >= 1 and every_shard == routed, (routed, every_shard)
    finally:
        await app.close()
    ok("SET LOCAL settings reach the workers (set_config: 0 rows)")


def function_text(name: str, version: str | None = None) -> str:
    """``CREATE OR REPLACE FUNCTION name`` as migration ``version`` defines it (by default
    the last migration that does)."""
    paths = sorted(MIGRATIONS.glob(f"{version or ''}*.sql"))
    pattern = rf"CREATE (?:OR REPLACE )?FUNCTION {name}\(.*?\n\$\$;"
    found = [m.group(0) for p in paths for m in [re.search(pattern, p.read_text(), re.S)] if m]
    assert found, (name, version)
    return found[-1].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


async def two_node_write(owner: asyncpg.Connection, tenants: list[str]) -> None:
    async with owner.transaction():
        for tenant in tenants:
            await owner.execute(INSERT_MEMORY, tenant, uuid.uuid4(), "two")
        await owner.execute(f"NOTIFY {NOTIFY_CHANNEL}, {setlocal.literal(tenants[0])}")


async def check_notify(owner: asyncpg.Connection, tenants: list[str]) -> None:
    heads = "SELECT seq FROM audit_heads WHERE tenant_id = $1"
    before = [await owner.fetchval(heads, t) for t in tenants]
    await two_node_write(owner, tenants)
    after = [await owner.fetchval(heads, t) for t in tenants]
    assert all(a == b + 1 for a, b in zip(after, before, strict=True)), (before, after)
    # Control: the trigger's pg_notify as migration 0003 sent it, on the workers.
    await owner.execute(function_text("brain_audit_append", "0003"))
    try:
        try:
            await two_node_write(owner, tenants)
        except asyncpg.PostgresError as exc:
            assert "PREPARE" in str(exc) or "NOTIFY" in str(exc), exc
        else:
            raise AssertionError("a NOTIFY on two workers committed: the control is wrong")
    finally:
        await owner.execute(function_text("brain_audit_append"))
    ok("a write over two workers commits, its audit chains extended (0003's NOTIFY: fails)")


async def check_notify_apart(owner: asyncpg.Connection, app_dsn: str, tenants: list[str]) -> None:
    """Where a write transaction's NOTIFY runs: listeners on every node, the server's
    tenant_tx with a read of the tenant's rows (so a worker connection opens)."""
    nodes = await owner.fetch(
        "SELECT nodename, nodeport FROM pg_dist_node WHERE noderole = 'primary' ORDER BY nodeid"
    )
    database = await owner.fetchval("SELECT current_database()")
    user = await owner.fetchval("SELECT current_user")
    heard: dict[int, list[str]] = {}
    listeners = []
    db = await Database.connect(app_dsn, max_size=1)
    try:
        for node in nodes:
            conn = await asyncpg.connect(
                host=node["nodename"], port=node["nodeport"], user=user, database=database
            )
            listeners.append(conn)
            await conn.add_listener(
                NOTIFY_CHANNEL,
                lambda c, pid, ch, payload, port=node["nodeport"]: heard.setdefault(
                    port, []
                ).append(str(payload)),
            )
        coordinator = await owner.fetchval("SELECT current_setting('port')::int")
        for apart in (True, False):
            heard.clear()
            db.notify_apart = apart
            for tenant in tenants:
                async with db.tenant_tx(tenant, labels=frozenset({"team"})) as conn:
                    await conn.fetchval(
                        "SELECT count(*) FROM memories WHERE tenant_id = $1", tenant
                    )
            for _ in range(50):  # notifications arrive after the commits
                if len(heard.get(coordinator, [])) >= len(tenants):
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.3)
            elsewhere = {port: got for port, got in heard.items() if port != coordinator}
            assert sorted(heard.get(coordinator, [])) == sorted(tenants), (apart, heard)
            if apart:
                assert elsewhere == {}, elsewhere
            else:  # the control: replayed with the settings on the tenants' workers
                assert len(elsewhere) >= 2, heard
    finally:
        await db.close()
        for conn in listeners:
            await conn.close()
    ok("a write's NOTIFY apart from its settings runs on the coordinator only (with them: "
       f"on {len(elsewhere)} workers too)")  # fmt: skip


async def check_ddl(owner: asyncpg.Connection) -> None:
    index = f"citus_check_{uuid.uuid4().hex[:8]}"
    try:
        async with owner.transaction():
            await owner.execute(f"CREATE INDEX {index} ON memories (namespace); SELECT 1")
    except asyncpg.PostgresError as exc:
        refused = str(exc)
    else:
        raise AssertionError("Citus took DDL in a multi-statement string: drop the split?")
    async with owner.transaction():
        await owner.execute(f"CREATE INDEX {index} ON memories (namespace)")
        await owner.execute(f"DROP INDEX {index}")
    ok(f"DDL one statement at a time (a multi-statement string: {refused})")


INSERT_DOCUMENT = """
    INSERT INTO documents (tenant_id, document_id, version, namespace, collection, path, format,
                           labels, status, content, created_by, changed_by, changed_by_key,
                           change)
    VALUES ($1, $2, 1, 'citus', 'docs', 'a.md', 'markdown', '{team}', 'active', 'text',
            'citus', 'citus', 'citus', 'put')"""
INSERT_CHUNK = """
    INSERT INTO document_chunks (tenant_id, chunk_id, document_id, version, chunk_no,
                                 namespace, collection, path, labels, content, line_start,
                                 line_end, recorded_at)
    VALUES ($1, $2, $3, 1, 0, 'citus', 'docs', 'a.md', '{team}', 'text', 1, 1,
            now() - interval '1 hour')"""
CLAIM = "SELECT tenant_id FROM brain_claim_chunk_embeddings(100, 60, 0, 0)"


async def check_chunk_claim(owner: asyncpg.Connection, tenants: list[str]) -> None:
    for tenant in tenants:
        document = uuid.uuid4()
        await owner.execute(INSERT_DOCUMENT, tenant, document)
        await owner.execute(INSERT_CHUNK, tenant, uuid.uuid4(), document)
    claimed = {str(r["tenant_id"]) for r in await owner.fetch(CLAIM)}
    assert set(tenants) <= claimed, (tenants, claimed)
    # Control: the claim as migration 0035 made it, one locking read over every tenant.
    await owner.execute(function_text("brain_claim_chunk_embeddings", "0035"))
    try:
        try:
            await owner.fetch(CLAIM)
        except asyncpg.PostgresError as exc:
            refused = str(exc)
        else:
            raise AssertionError("0035's claim ran on the cluster: the control is wrong")
    finally:
        await owner.execute(function_text("brain_claim_chunk_embeddings"))
    ok(f"the chunk claim takes both workers' tenants (0035's claim: {refused})")


async def main(owner_dsn: str, app_dsn: str) -> None:
    owner = await asyncpg.connect(owner_dsn)
    try:
        tenants = await tenants_on_two_workers(owner)
        await check_settings(app_dsn, tenants)
        await check_notify(owner, tenants)
        await check_notify_apart(owner, app_dsn, tenants)
        await check_ddl(owner)
        await check_chunk_claim(owner, tenants)
    finally:
        await owner.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
