"""One tenant's backup and restore, as JSON Lines driven by the schema.

A backup is a header line, then one line per row of every table that carries
``tenant_id`` (parents before children, rows in primary-key order), then an end line with
the counts, all read in one REPEATABLE READ snapshot. Rows travel as ``to_jsonb``: every
type in its text form (vectors, bytea as hex, timestamps), generated columns left out, so
a table added by a later migration is carried without code here. Two tables never are:
API keys (their hashes are secrets; mint new keys after a restore) and idempotency
records (request bindings for client retries; they name a memory and hold no content).
BM25's term statistics and the audit log's filing by visibility cell are not carried
either: a restore derives them again from the rows.

A restore writes the rows back verbatim in one transaction, with the tables' triggers
disabled for that transaction only (they would log the restore as new writes and break
the copied hash chain), then appends one ``admin.tenant.restore`` event to the chain.
It refuses a tenant that already exists, a file from another pepper (tombstones and
dedupe fingerprints are keyed hashes under it), a file from a newer schema, a row of
another tenant, and a truncated file; any refusal writes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from typing import Any

import asyncpg

from brain.server.storage.migrate import load_migrations

FORMAT = "shared-brain-backup"
FORMAT_VERSION = 1
NOT_BACKED_UP = (
    "api_keys",
    "api_key_tenants",
    "idempotency_keys",
    "lexical_cells",
    "lexical_terms",
    "audit_cells",
    "audit_cell_events",
)
_BATCH = 500


class BackupError(Exception):
    """The backup cannot be made or restored; the message says why."""


def pepper_check(pepper: bytes) -> str:
    """Identifies the pepper without revealing it."""
    return hmac.new(pepper, b"brain-backup-pepper-check", hashlib.sha256).hexdigest()[:32]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def tenant_tables(conn: asyncpg.Connection) -> list[str]:
    """Every table with a tenant_id column, referenced tables first, ``tenants`` first."""
    rows = await conn.fetch(
        """SELECT c.relname,
                  ARRAY(SELECT r.relname FROM pg_constraint k JOIN pg_class r ON r.oid = k.confrelid
                        WHERE k.conrelid = c.oid AND k.contype = 'f' AND r.oid <> c.oid) AS refs
           FROM pg_class c
           WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
             AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid
                         AND a.attname = 'tenant_id' AND NOT a.attisdropped)
           ORDER BY c.relname"""
    )
    refs = {r["relname"]: set(r["refs"]) for r in rows}
    ordered: list[str] = []
    while refs:
        ready = sorted(t for t, deps in refs.items() if not deps - set(ordered))
        if not ready:
            raise BackupError(f"foreign keys form a cycle among {sorted(refs)}")
        ordered.extend(ready)
        for t in ready:
            del refs[t]
    ordered.remove("tenants")
    return ["tenants", *ordered]


async def _columns(conn: asyncpg.Connection, table: str) -> tuple[list[str], list[str]]:
    """(stored columns, generated columns) of a table."""
    rows = await conn.fetch(
        """SELECT attname, attgenerated <> '' AS generated FROM pg_attribute
           WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum""",
        table,
    )
    return [r[0] for r in rows if not r[1]], [r[0] for r in rows if r[1]]


async def _primary_key(conn: asyncpg.Connection, table: str) -> list[str]:
    rows = await conn.fetch(
        """SELECT a.attname FROM pg_index x
           CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k (attnum, ord)
           JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
           WHERE x.indrelid = $1::regclass AND x.indisprimary ORDER BY k.ord""",
        table,
    )
    return [r[0] for r in rows]


async def _applied(conn: asyncpg.Connection) -> list[str]:
    rows = await conn.fetch("SELECT version, name FROM brain_schema_migrations ORDER BY version")
    return [f"{r['version']:04d}_{r['name']}" for r in rows]


async def backup(conn: asyncpg.Connection, pepper: bytes, tenant: str) -> AsyncIterator[str]:
    """The backup of one tenant (by name), line by line (no trailing newlines)."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        tenant_id = await conn.fetchval("SELECT tenant_id FROM tenants WHERE name = $1", tenant)
        if tenant_id is None:
            raise BackupError(f"no tenant named {tenant!r}")
        yield json.dumps(
            {
                "type": "header",
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "tenant": tenant,
                "tenant_id": str(tenant_id),
                "schema": await _applied(conn),
                "pepper_check": pepper_check(pepper),
                "created_at": datetime.now(UTC).isoformat(),
            }
        )
        counts: dict[str, int] = {}
        for table in await tenant_tables(conn):
            if table in NOT_BACKED_UP:
                continue
            _, generated = await _columns(conn, table)
            order = ", ".join(_ident(c) for c in await _primary_key(conn, table)) or "1"
            query = (
                f"SELECT jsonb_build_object('type', 'row', 'table', $2::text, "
                f"'row', to_jsonb(t) - $3::text[])::text "
                f"FROM {_ident(table)} t WHERE tenant_id = $1 ORDER BY {order}"
            )
            counts[table] = 0
            async for record in conn.cursor(query, tenant_id, table, generated, prefetch=_BATCH):
                counts[table] += 1
                yield record[0]
        yield json.dumps({"type": "end", "counts": counts})


async def restore(conn: asyncpg.Connection, pepper: bytes, lines: Iterable[str]) -> dict[str, Any]:
    """Restore one tenant's backup into this database; all or nothing."""
    stream = (line for line in lines if line.strip())
    header = _parse(next(stream, ""), 1)
    _check_header(header, pepper)
    tenant_id = header["tenant_id"]
    async with conn.transaction():
        known = set(await _applied(conn))
        missing = [m for m in header["schema"] if m not in known]
        if missing:
            raise BackupError(
                f"the backup comes from a newer schema ({', '.join(missing)}); "
                "run `brain-admin migrate` of that release first"
            )
        clash = await conn.fetchval(
            "SELECT name FROM tenants WHERE tenant_id = $1::uuid OR name = $2",
            tenant_id,
            header["tenant"],
        )
        if clash is not None:
            raise BackupError(
                f"tenant {clash!r} already exists here; restore into a database without it"
            )
        tables = [t for t in await tenant_tables(conn) if t not in NOT_BACKED_UP]
        for table in tables:  # this transaction only: rolled back or re-enabled before commit
            await conn.execute(f"ALTER TABLE {_ident(table)} DISABLE TRIGGER USER")
        counts = await _insert_rows(conn, stream, tables, tenant_id)
        for table in tables:
            await conn.execute(f"ALTER TABLE {_ident(table)} ENABLE TRIGGER USER")
        if counts.get("tenants") != 1:
            raise BackupError("the backup holds no tenant row")
        await conn.execute("SELECT brain_rebuild_lexical_stats($1::uuid)", tenant_id)
        await conn.execute("SELECT brain_rebuild_audit_cells($1::uuid)", tenant_id)
        await conn.execute(
            """SELECT brain_audit_append($1::uuid, '',
                   COALESCE(NULLIF(current_setting('brain.principal', true), ''), 'admin'),
                   'admin.tenant.restore', '{}', $2)""",
            tenant_id,
            f"restored backup made at {header['created_at']}",
        )
    return {"tenant": header["tenant"], "tenant_id": tenant_id, "rows": counts}


def _parse(line: str, number: int) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise BackupError(f"line {number} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise BackupError(f"line {number} is not a JSON object")
    return value


def _check_header(header: dict[str, Any], pepper: bytes) -> None:
    if header.get("type") != "header" or header.get("format") != FORMAT:
        raise BackupError(f"not a {FORMAT} file (no header line)")
    if header.get("format_version") != FORMAT_VERSION:
        raise BackupError(f"backup format {header.get('format_version')} is not supported")
    if not hmac.compare_digest(str(header.get("pepper_check", "")), pepper_check(pepper)):
        raise BackupError(
            "the backup was made under another pepper; restore with the pepper file of the "
            "deployment it came from (tombstones and fingerprints are keyed hashes under it)"
        )
    shipped = {f"{m.version:04d}_{m.name}" for m in load_migrations()}
    newer = [m for m in header.get("schema", []) if m not in shipped]
    if newer:
        raise BackupError(
            f"the backup comes from a newer release (migrations {', '.join(newer)}); "
            "restore it with that release's brain-admin"
        )


async def _insert_rows(
    conn: asyncpg.Connection, stream: Iterable[str], tables: list[str], tenant_id: str
) -> dict[str, int]:
    counts: dict[str, int] = {}
    columns = {t: set((await _columns(conn, t))[0]) for t in tables}
    batch: list[str] = []
    batch_key: tuple[str, tuple[str, ...]] | None = None

    async def flush() -> None:
        if batch_key is None or not batch:
            return
        table, cols = batch_key
        names = ", ".join(_ident(c) for c in cols)
        await conn.executemany(
            f"INSERT INTO {_ident(table)} ({names}) "
            f"SELECT {names} FROM jsonb_populate_record(NULL::{_ident(table)}, $1::jsonb)",
            [(row,) for row in batch],
        )
        batch.clear()

    for number, line in enumerate(stream, start=2):
        item = _parse(line, number)
        if item.get("type") == "end":
            await flush()
            expected = {t: n for t, n in (item.get("counts") or {}).items() if n}
            if expected != counts:
                raise BackupError(f"row counts do not match the end line: {item.get('counts')}")
            return counts
        table, row = item.get("table"), item.get("row")
        if item.get("type") != "row" or table not in columns or not isinstance(row, dict):
            raise BackupError(f"line {number}: not a row of a tenant table this schema has")
        if row.get("tenant_id") != tenant_id:
            raise BackupError(f"line {number}: a row of another tenant")
        unknown = set(row) - columns[table]
        if unknown:
            raise BackupError(f"line {number}: {table} has no column(s) {sorted(unknown)}")
        key = (table, tuple(sorted(row)))
        if key != batch_key or len(batch) >= _BATCH:
            await flush()
            batch_key = key
        batch.append(json.dumps(row))
        counts[table] = counts.get(table, 0) + 1
    raise BackupError("the backup is truncated (no end line)")
