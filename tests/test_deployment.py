"""Deployment guarantees: upgrades keep data, old code refuses a newer schema, and the
schema stays shardable by tenant (Citus needs every key and join to lead with tenant_id).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from brain.authz import ALL_PERMISSIONS, Confinement
from brain.server.runtime.app import StartupError, start_server
from brain.server.storage import admin, backup
from brain.server.storage.backup import BackupError
from brain.server.storage.migrate import MigrationError, load_migrations, migrate
from brain.v1 import common_pb2, knowledge_pb2, knowledge_pb2_grpc, memory_pb2

from .conftest import BrainServer, PgCluster, server_settings, unique
from .helpers import Api, rpc_error
from .zygote import run_module

# The migrations release 0.1.0 shipped. Later releases append here, never edit.
RELEASE_0_1_0 = (
    "0001_foundation.sql",
    "0002_lifecycle.sql",
    "0003_audit.sql",
    "0004_retrieval.sql",
)
# Global tables: Citus reference tables, replicated to every node, keyed without tenant_id.
# api_key_tenants: a key's tenant by its public id alone, read to authenticate a request
# before its tenant is known, locally on a Citus coordinator (migration 0061).
REFERENCE_TABLES = {"tenants", "brain_schema_migrations", "api_key_tenants"}
SERVER_SQL = Path(__file__).resolve().parent.parent / "server"


# On a deployment (make test-external) the owner may not create databases: the harness
# creates a few empty ones (owned by brain_owner, pgvector installed) and names them here.
def release_0_1_0_fingerprint(pepper: bytes, content: str) -> bytes:
    """The tombstone fingerprint as 0.1.0 wrote it (frozen: upgrades must keep honouring it)."""
    normalised = " ".join(content.casefold().split()).encode()
    return hmac.new(pepper, b"fingerprint:" + normalised, hashlib.sha256).digest()


async def seed_release_0_1_0(dsn: str, pepper: bytes) -> dict[str, str]:
    """Rows as a 0.1.0 server left them, written in 0.1.0's schema (frozen SQL)."""
    tenant, kept, erased = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(
                "INSERT INTO tenants (tenant_id, name) VALUES ($1, $2)", tenant, unique("old")
            )
            await conn.execute(
                """INSERT INTO memories (tenant_id, memory_id, version, namespace, content,
                       labels, status, valid_from, recorded_at, retired_at, created_by,
                       changed_by, changed_by_key, change)
                   VALUES ($1, $2, 1, 'proj', 'The staging database listens on port 5432',
                           '{team}', 'active', now(), now() - interval '1 hour',
                           now() - interval '1 minute', 'alice', 'alice', 'k1', 'save'),
                          ($1, $2, 2, 'proj', 'The staging database listens on port 5433',
                           '{team}', 'active', now(), now() - interval '1 minute', NULL,
                           'alice', 'alice', 'k1', 'update'),
                          ($1, $3, 1, 'proj', '', '{team}', 'retracted', now(),
                           now() - interval '1 hour', NULL, 'alice', 'alice', 'k1', 'forget')""",
                tenant,
                kept,
                erased,
            )
            await conn.execute(
                """INSERT INTO tombstones (tenant_id, tombstone_id, namespace, user_id,
                       session_id, fingerprint, memory_id, cause, created_by)
                   VALUES ($1, $2, 'proj', '', '', $3, $4, 'forget', 'alice')""",
                tenant,
                uuid.uuid4(),
                release_0_1_0_fingerprint(pepper, "The deploy password is hunter2"),
                erased,
            )
    finally:
        await conn.close()
    return {"tenant": str(tenant), "kept": str(kept), "erased": str(erased)}


async def mint_full_key(dsn: str, pepper: bytes, tenant_id: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        name = await conn.fetchval("SELECT name FROM tenants WHERE tenant_id = $1", tenant_id)
        minted = await admin.mint_key(
            conn,
            pepper,
            tenant=name,
            principal="alice",
            permissions=ALL_PERMISSIONS,
            confinement=Confinement(),
            labels=frozenset({"team"}),
            expires_at=None,
        )
    finally:
        await conn.close()
    return minted.key


def test_release_0_1_0_migration_list_is_a_prefix_of_the_shipped_ones() -> None:
    """The frozen release list names real files, in order, at the start of the history."""
    shipped = [m.filename for m in load_migrations()]
    assert tuple(shipped[: len(RELEASE_0_1_0)]) == RELEASE_0_1_0


async def test_a_release_0_1_0_database_upgrades_without_loss(
    pg_cluster: PgCluster, fresh_database: tuple[str, str]
) -> None:
    """Data written under 0.1.0's schema reads back, erased and tombstoned, after migrating."""
    owner_dsn, app_dsn = fresh_database
    old = [m for m in load_migrations() if m.filename in RELEASE_0_1_0]
    assert [m.filename for m in await migrate(owner_dsn, old)] == list(RELEASE_0_1_0)
    ids = await seed_release_0_1_0(owner_dsn, pg_cluster.pepper)

    await migrate(owner_dsn)  # to the current schema: whatever came after 0.1.0
    key = await mint_full_key(owner_dsn, pg_cluster.pepper, ids["tenant"])
    running = await start_server(server_settings(pg_cluster, database_url=app_dsn, embedder="none"))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            api = Api(channel, key, namespace="proj")
            current = await api.get(ids["kept"])
            assert current.content == "The staging database listens on port 5433"
            history = await api.history(ids["kept"])  # oldest first
            assert [(m.version, m.content) for m in history] == [
                (1, "The staging database listens on port 5432"),
                (2, "The staging database listens on port 5433"),
            ]
            assert await api.search("staging port", mode=memory_pb2.SEARCH_MODE_LEXICAL) == [
                ids["kept"]
            ]
            erased = await api.get(ids["erased"])
            assert (erased.content, erased.status) == ("", common_pb2.MEMORY_STATUS_RETRACTED)
            err = await rpc_error(api.save("the deploy password is  HUNTER2"))
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "tombstone" in (err.details() or "")
            fresh = await api.save("A value 0.1.0 never saw")  # positive control: writes work
            assert fresh.outcome == memory_pb2.SAVE_OUTCOME_CREATED
    finally:
        await running.stop(grace=0)


async def test_old_code_refuses_a_newer_schema(
    pg_cluster: PgCluster, fresh_database: tuple[str, str]
) -> None:
    """A migration this code does not know stops brain-server and brain-admin migrate."""
    owner_dsn, app_dsn = fresh_database
    await migrate(owner_dsn)
    settings = server_settings(pg_cluster, database_url=app_dsn, embedder="none")
    running = await start_server(settings)  # positive control: the same database serves
    await running.stop(grace=0)

    conn = await asyncpg.connect(owner_dsn)
    try:
        await conn.execute(
            """INSERT INTO brain_schema_migrations (version, name, checksum)
               VALUES (9999, 'from_the_future', 'x')"""
        )
    finally:
        await conn.close()
    with pytest.raises(
        StartupError, match=r"schema is newer than this release.*9999_from_the_future"
    ):
        await start_server(settings)
    with pytest.raises(MigrationError, match="9999_from_the_future"):
        await migrate(owner_dsn)


async def test_every_key_leads_with_tenant_id(pg_cluster: PgCluster) -> None:
    """Outside the reference tables every PK, unique index and FK starts with tenant_id."""
    conn = await asyncpg.connect(pg_cluster.owner_dsn)
    try:
        keys = await conn.fetch(
            """SELECT c.relname AS table_name, i.relname AS key_name,
                      CASE WHEN x.indisprimary THEN 'primary key' ELSE 'unique' END AS kind,
                      (SELECT attname FROM pg_attribute
                       WHERE attrelid = c.oid AND attnum = x.indkey[0]) AS first_column
               FROM pg_index x
               JOIN pg_class c ON c.oid = x.indrelid
               JOIN pg_class i ON i.oid = x.indexrelid
               WHERE x.indisunique AND c.relnamespace = 'public'::regnamespace
               UNION ALL
               SELECT c.relname, k.conname, 'foreign key',
                      (SELECT attname FROM pg_attribute
                       WHERE attrelid = c.oid AND attnum = k.conkey[1])
               FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
               WHERE k.contype = 'f' AND c.relnamespace = 'public'::regnamespace"""
        )
        tables = await conn.fetch(
            """SELECT c.relname,
                      EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid
                              AND a.attname = 'tenant_id' AND NOT a.attisdropped) AS has_tenant
               FROM pg_class c
               WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')"""
        )
    finally:
        await conn.close()
    # The query must see the schema, or an empty answer would pass.
    assert ("memories", "primary key", "tenant_id") in {
        (k["table_name"], k["kind"], k["first_column"]) for k in keys
    }
    assert any(k["kind"] == "foreign key" for k in keys)
    offenders = [
        f"{k['table_name']}.{k['key_name']} ({k['kind']}) leads with {k['first_column']}"
        for k in keys
        if k["table_name"] not in REFERENCE_TABLES and k["first_column"] != "tenant_id"
    ]
    assert offenders == [], "Citus needs tenant_id first: " + "; ".join(offenders)
    untenanted = [
        t["relname"] for t in tables if not t["has_tenant"] and t["relname"] not in REFERENCE_TABLES
    ]
    assert untenanted == [], (
        f"tables without tenant_id (add it, or list a reference table): {untenanted}"
    )


# `JOIN <table> [alias] ON ... | USING (...)`, up to the next clause keyword.
_JOIN = re.compile(
    r"\bJOIN\s+(?P<table>[a-z_]+)\b(?:\s+(?:AS\s+)?[a-z_]+)?\s+"
    r"(?P<cond>(?:ON|USING)\b.*?)(?=\bJOIN\b|\bWHERE\b|\bGROUP\b|\bORDER\b|\bLIMIT\b|\)\s*$|$)",
    re.IGNORECASE | re.DOTALL,
)


def cross_tenant_joins(sql_text: str, tables: set[str]) -> list[str]:
    """Joins onto a tenant table whose condition does not mention tenant_id."""
    return [
        m.group(0).strip()
        for m in _JOIN.finditer(sql_text)
        if m.group("table").lower() in tables and "tenant_id" not in m.group("cond")
    ]


def test_join_checker_catches_a_join_without_tenant_id() -> None:
    """The checker flags a join on memory_id alone and passes one keyed on tenant_id."""
    tables = {"memories", "tombstones"}
    bad = "SELECT * FROM memories m JOIN tombstones t ON t.memory_id = m.memory_id WHERE x"
    good = "SELECT * FROM memories m JOIN tombstones t USING (tenant_id, memory_id) WHERE x"
    assert cross_tenant_joins(bad, tables) != []
    assert cross_tenant_joins(good, tables) == []


async def test_no_statement_joins_across_tenants(pg_cluster: PgCluster) -> None:
    """Every JOIN onto a tenant table in server/ SQL (code and migrations) keys on tenant_id."""
    conn = await asyncpg.connect(pg_cluster.owner_dsn)
    try:
        rows = await conn.fetch(
            """SELECT c.relname FROM pg_class c
               WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')"""
        )
    finally:
        await conn.close()
    tables = {r["relname"] for r in rows} - REFERENCE_TABLES
    assert "memories" in tables
    sources = [*SERVER_SQL.rglob("*.py"), *SERVER_SQL.rglob("*.sql")]
    # Positive control: the scan reaches SQL with joins, or an empty tree would pass.
    assert any(_JOIN.search(path.read_text()) for path in sources)
    found = {
        f"{path.relative_to(SERVER_SQL)}: {join}"
        for path in sources
        for join in cross_tenant_joins(path.read_text(), tables)
    }
    assert found == set(), "joins without tenant_id:\n" + "\n".join(sorted(found))


def run_admin(owner_dsn: str, pepper_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """brain-admin in a process of its own against any database, as its owner."""
    return run_module(
        "brain.server.admin.main", "--database-url", owner_dsn,
        "--pepper-file", str(pepper_file), *args, timeout=60,
    )  # fmt: skip


async def test_backup_and_restore_keep_the_guarantees(
    brain_server: BrainServer,
    channel: grpc.aio.Channel,
    pg_cluster: PgCluster,
    fresh_database: tuple[str, str],
    tmp_path: Path,
) -> None:
    """A tenant's backup holds every version but no erased value or key; restored, it serves,
    passes audit verify and keeps its tombstones; bad files and clashes restore nothing."""
    tenant = unique("bk")
    key = brain_server.mint_key(tenant, "alice", permissions=",".join(sorted(ALL_PERMISSIONS)))
    api = Api(channel, key, namespace="proj")
    kept = (await api.save("Backups run nightly at 02:00")).memory.id
    await api.update(kept, ["content"], content="Backups run nightly at 03:00")
    erased = (await api.save("The vault code is kilo-7391-quebec")).memory.id
    await api.forget(erased)
    docs = knowledge_pb2_grpc.KnowledgeServiceStub(channel)

    async def put(path: str, content: str) -> knowledge_pb2.Document:
        request = knowledge_pb2.PutDocumentRequest(
            scope=api.scope(), collection="ops", path=path, content=content
        )
        return (await docs.PutDocument(request, metadata=api.md)).document

    runbook = (await put("runbook.md", "# Runbook\n\nRestore drills run quarterly.\n")).id
    await put("runbook.md", "# Runbook\n\nRestore drills run monthly.\n")
    dropped = await put("payroll.md", "# Payroll\n\nThe payroll PIN is quokkazebra.\n")
    await docs.DeleteDocument(
        knowledge_pb2.DeleteDocumentRequest(scope=api.scope(), id=dropped.id), metadata=api.md
    )
    brain_server.admin("namespaces", "set", "reviewed", "--tenant", tenant, "--review-required")
    other = Api(channel, brain_server.mint_key(unique("bk"), "bob"), namespace="proj")
    await other.save("Another team's roadmap")

    path = tmp_path / "tenant.jsonl"
    brain_server.admin("backup", "--tenant", tenant, "--out", str(path))
    text = path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    assert "02:00" in text and "03:00" in text  # every version
    # No erased value (a marker no hash or timestamp can hold), no other tenant.
    assert "kilo-7391" not in text and "roadmap" not in text
    assert "quarterly" in text and "monthly" in text and "quokkazebra" not in text  # documents too
    assert key.split("_")[2][:16] not in text and "secret_hash" not in text
    events = brain_server.sql(
        "SELECT count(*) FROM audit_events a JOIN tenants t USING (tenant_id) WHERE t.name = $1",
        tenant,
    )[0][0]

    owner_dsn, app_dsn = fresh_database
    await migrate(owner_dsn)
    lines = text.splitlines()
    truncated = tmp_path / "truncated.jsonl"
    truncated.write_text("\n".join(lines[:-1]) + "\n")
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text(text.replace(f'"tenant_id": "{json.loads(lines[0])["tenant_id"]}"',
                                    f'"tenant_id": "{uuid.uuid4()}"', 3))  # fmt: skip
    for bad, pepper, says in [  # in-process: the CLI path is exercised below
        (truncated, pg_cluster.pepper, "truncated"),
        (foreign, pg_cluster.pepper, "another tenant"),
        (path, b"another deployment's pepper", "another pepper"),
    ]:
        with pytest.raises(BackupError, match=says):
            await restore_file(owner_dsn, pepper, bad)
    assert await fetchval(owner_dsn, "SELECT count(*) FROM tenants") == 0

    done = run_admin(owner_dsn, pg_cluster.pepper_file, "restore", str(path))
    assert done.returncode == 0, done.stderr
    verify = run_admin(owner_dsn, pg_cluster.pepper_file, "audit", "verify", "--tenant", tenant)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert await fetchval(owner_dsn, "SELECT count(*) FROM audit_events") == events + 1
    assert await fetchval(owner_dsn, "SELECT count(*) FROM api_keys") == 0
    with pytest.raises(BackupError, match="already exists"):
        await restore_file(owner_dsn, pg_cluster.pepper, path)
    policy = await fetchval(owner_dsn, "SELECT review_required FROM namespace_policies")
    assert policy is True

    tenant_id = await fetchval(owner_dsn, "SELECT tenant_id::text FROM tenants")
    restored_key = await mint_full_key(owner_dsn, pg_cluster.pepper, tenant_id)
    running = await start_server(server_settings(pg_cluster, database_url=app_dsn, embedder="none"))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            restored = Api(ch, restored_key, namespace="proj")
            assert (await restored.get(kept)).content == "Backups run nightly at 03:00"
            assert len(await restored.history(kept)) == 2
            gone = await restored.get(erased)
            assert (gone.content, gone.status) == ("", common_pb2.MEMORY_STATUS_RETRACTED)
            err = await rpc_error(restored.save("the vault code is kilo-7391-quebec"))
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert (await restored.save("A new fact")).outcome == memory_pb2.SAVE_OUTCOME_CREATED
            stub = knowledge_pb2_grpc.KnowledgeServiceStub(ch)
            found = await stub.SearchKnowledge(
                knowledge_pb2.SearchKnowledgeRequest(
                    scope=restored.scope(), query="restore drills monthly"
                ),
                metadata=restored.md,
            )
            assert [h.source.document_id for h in found.hits] == [runbook]
            old = await stub.GetDocument(
                knowledge_pb2.GetDocumentRequest(
                    scope=restored.scope(), id=runbook, version=1, include_content=True
                ),
                metadata=restored.md,
            )
            assert "quarterly" in old.document.content
    finally:
        await running.stop(grace=0)
    after = run_admin(owner_dsn, pg_cluster.pepper_file, "audit", "verify", "--tenant", tenant)
    assert after.returncode == 0, after.stdout + after.stderr  # the chain goes on from the copy


async def restore_file(dsn: str, pepper: bytes, path: Path) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        with path.open(encoding="utf-8") as lines:
            await backup.restore(conn, pepper, lines)
    finally:
        await conn.close()


async def fetchval(dsn: str, query: str) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()
