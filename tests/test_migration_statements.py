"""Migrations are applied one statement at a time (Citus refuses some DDL inside a
multi-statement string), and on PostgreSQL that builds exactly the schema the whole
string does."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from brain.server.storage import migrate
from brain.server.storage.migrate import split_statements

from .conftest import PgCluster, unique


def test_split_ends_statements_only_where_postgres_does() -> None:
    """A ; in strings, quoted names, dollar bodies or comments does not end a statement."""
    sql = """
        -- a comment; with a semicolon and a 'quote
        CREATE TABLE "we;ird" (a text DEFAULT 'x;y''z;');
        /* block; /* nested; */ still comment; */
        SELECT E'it\\'s; \\\\', $1, a$b FROM t;
        CREATE FUNCTION f() RETURNS text LANGUAGE plpgsql AS $body$
        BEGIN RETURN $$;$$ || ';'; END $body$;
        DO $$ BEGIN PERFORM 1; END $$;
        SELECT DATE'2020-01-01', U&'d\\0061t;a'; ;;
        -- trailing comment;
        SELECT 'last'"""
    assert split_statements(sql) == [
        """CREATE TABLE "we;ird" (a text DEFAULT 'x;y''z;')""",
        "SELECT E'it\\'s; \\\\', $1, a$b FROM t",
        "CREATE FUNCTION f() RETURNS text LANGUAGE plpgsql AS $body$\n"
        "        BEGIN RETURN $$;$$ || ';'; END $body$",
        "DO $$ BEGIN PERFORM 1; END $$",
        "SELECT DATE'2020-01-01', U&'d\\0061t;a'",
        "SELECT 'last'",
    ]
    assert split_statements("-- only a comment;\n/* ; */ ;") == []
    for broken in ["SELECT 'open", "SELECT $x$ open", 'SELECT "open', "/* open"]:
        with pytest.raises(ValueError):
            split_statements(broken)
    with pytest.raises(ValueError, match="ATOMIC"):
        split_statements("CREATE FUNCTION g() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END")


def test_every_shipped_migration_splits_into_whole_statements() -> None:
    """Each shipped migration splits into trimmed pieces found, in order, in its text."""
    for m in migrate.load_migrations():
        pieces = split_statements(m.sql)
        assert pieces, m.filename
        for piece in pieces:
            assert not piece.endswith(";") and piece == piece.strip(), (m.filename, piece)
        # No text is lost: every piece is found, in order, in the migration.
        at = 0
        for piece in pieces:
            found = m.sql.find(piece, at)
            assert found >= 0, (m.filename, piece[:80])
            at = found + len(piece)


SCHEMA = [
    """SELECT c.relname, c.relkind::text, c.relrowsecurity, c.relforcerowsecurity,
              COALESCE(c.relacl::text, '')
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = 'public' ORDER BY 1""",
    """SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
              COALESCE(pg_get_expr(d.adbin, d.adrelid), '')
       FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
       JOIN pg_namespace n ON n.oid = c.relnamespace
       LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
       WHERE n.nspname = 'public' AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, 2""",
    "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1",
    """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
       FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2""",
    """SELECT tablename, policyname, permissive, roles::text, cmd, COALESCE(qual, ''),
              COALESCE(with_check, '')
       FROM pg_policies WHERE schemaname = 'public' ORDER BY 1, 2""",
    """SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), p.proleakproof,
              COALESCE(p.proacl::text, '')
       FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.prokind <> 'a'
       ORDER BY 1""",
    """SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)
       FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1, 2""",
    "SELECT extname FROM pg_extension ORDER BY 1",
]


async def schema_of(dsn: str) -> list[list[tuple[object, ...]]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [[tuple(r) for r in await conn.fetch(q)] for q in SCHEMA]
    finally:
        await conn.close()


@pytest.fixture
async def two_databases(pg_cluster: PgCluster) -> AsyncIterator[tuple[str, str]]:
    """Two empty databases on the embedded cluster (owner DSNs)."""
    if pg_cluster.pg is None:
        pytest.skip("needs the embedded cluster (creates databases)")
    pg = pg_cluster.embedded_pg
    names = [unique("split").replace("-", "_") for _ in range(2)]
    boot = await asyncpg.connect(pg.bootstrap_dsn)
    try:
        for name in names:
            await boot.execute(f"CREATE DATABASE {name}")
        yield pg.dsn("postgres", names[0]), pg.dsn("postgres", names[1])
    finally:
        for name in names:
            await boot.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await boot.close()


async def test_statement_at_a_time_builds_the_same_schema_as_whole_migrations(
    two_databases: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Split or whole, the migrations build an identical catalog (tables to grants)."""
    split_dsn, whole_dsn = two_databases
    await migrate.migrate(split_dsn)
    monkeypatch.setattr(migrate, "split_statements", lambda sql: [sql])
    await migrate.migrate(whole_dsn)
    split, whole = await schema_of(split_dsn), await schema_of(whole_dsn)
    assert all(split), "an empty catalog section: the comparison would prove nothing"
    for query, a, b in zip(SCHEMA, split, whole, strict=True):
        assert a == b, query


async def test_an_existing_extension_is_not_created_again(pg_cluster: PgCluster) -> None:
    """Only a bare CREATE EXTENSION IF NOT EXISTS of an installed extension is skipped."""
    conn = await asyncpg.connect(pg_cluster.owner_dsn)
    try:
        present = migrate._extension_present
        assert await present(conn, "CREATE EXTENSION IF NOT EXISTS vector")
        assert await present(conn, "create extension  if not exists\nvector")
        assert not await present(conn, "CREATE EXTENSION IF NOT EXISTS no_such_extension")
        assert not await present(conn, "CREATE EXTENSION vector")
        assert not await present(conn, "CREATE EXTENSION IF NOT EXISTS vector SCHEMA x")
    finally:
        await conn.close()
