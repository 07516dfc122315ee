"""Request settings travel as quoted ``SET LOCAL`` literals (storage/setlocal.py).

Row-level security reads these settings, so the quoting is a security boundary: hostile
values must come back byte for byte and run nothing. The injection checks connect as the
owner, for whom an injected statement would have succeeded.
"""

from __future__ import annotations

import asyncpg
import pytest

from brain.server.storage import setlocal
from brain.server.storage.db import Database

from .conftest import PgCluster, unique

HOSTILE = [
    "",
    "'",
    "''",
    "\\",
    "\\'",
    "it's",
    "'; CREATE TABLE setlocal_pwned (); --",
    "\\'; CREATE TABLE setlocal_pwned (); --",
    "x'; SET LOCAL brain.injected = 'yes",
    "$$; CREATE TABLE setlocal_pwned (); $$",
    "$q$ $$ '$$'",
    "line one\nline two\r\n; CREATE TABLE setlocal_pwned ();",
    "E'\\x41' \\n \\t \\\\ \\0",
    "/* unterminated comment",
    "-- comment",
    '{"a","b"}',
    "naïve ✓ 😀 \u2028",
    "a" * 5000,
]
NAMES = ["brain.tenant_id", "brain.principal", "brain.labels", "brain.method"]


def test_literal_and_names_refuse_what_cannot_be_a_setting() -> None:
    """A NUL in a value and anything but a plain or dotted identifier as a name are refused."""
    with pytest.raises(ValueError):
        setlocal.literal("a\0b")
    for bad in ["brain.x; DROP TABLE t", "Brain.x", "a.b.c", "x = 1", "", '"q"']:
        with pytest.raises(ValueError):
            setlocal.statements({bad: "v"})
    assert setlocal.literal("plain") == "'plain'"
    assert setlocal.statements({"a.b": "1", "c": "it's"}) == (
        "SET LOCAL a.b = '1';\nSET LOCAL c = 'it''s'"
    )


async def test_literal_reads_back_as_the_value_in_postgres(pg_cluster: PgCluster) -> None:
    """Each hostile value, quoted, reads back exactly, standard_conforming_strings on or off."""
    conn = await asyncpg.connect(pg_cluster.owner_dsn, statement_cache_size=0)  # parse anew
    try:
        for conforming in ("on", "off"):
            await conn.execute(f"SET standard_conforming_strings = {conforming}")
            for value in HOSTILE:
                got = await conn.fetchval(f"SELECT {setlocal.literal(value)}::text")
                assert got == value, (conforming, value)
    finally:
        await conn.close()


async def test_hostile_settings_hold_the_exact_value_and_nothing_else_runs(
    pg_cluster: PgCluster,
) -> None:
    """Hostile SET LOCALs in one round trip hold their exact value and inject nothing."""
    conn = await asyncpg.connect(pg_cluster.owner_dsn)
    try:
        for conforming in ("on", "off"):
            await conn.execute(f"SET standard_conforming_strings = {conforming}")
            for i in range(0, len(HOSTILE), len(NAMES)):
                values = dict(zip(NAMES, HOSTILE[i : i + len(NAMES)], strict=False))
                async with conn.transaction():
                    await setlocal.set_local(conn, values)
                    for name, value in values.items():
                        assert await conn.fetchval("SELECT current_setting($1)", name) == value
                    assert not await conn.fetchval("SELECT current_setting('brain.injected', true)")
                for name in values:  # transaction-local: gone after commit
                    assert not await conn.fetchval("SELECT current_setting($1, true)", name)
        assert await conn.fetchval("SELECT to_regclass('setlocal_pwned')") is None
    finally:
        await conn.close()


async def test_tenant_transaction_carries_hostile_request_values(pg_cluster: PgCluster) -> None:
    """Database.tenant_tx (as the app role) sets the caller's exact hostile strings."""
    db = await Database.connect(pg_cluster.app_dsn, max_size=1)
    try:
        tenant_id = "00000000-0000-4000-8000-000000000001"
        for value in HOSTILE:
            principal = f"{unique('p')}{value}"
            async with db.tenant_tx(
                tenant_id, key_id=value, principal=principal, method=value, readonly=True
            ) as conn:
                got = await conn.fetchrow(
                    """SELECT current_setting('brain.tenant_id') AS t,
                              current_setting('brain.key_id') AS k,
                              current_setting('brain.principal') AS p,
                              current_setting('brain.method') AS m,
                              current_setting('brain.injected', true) AS i"""
                )
                assert (got["t"], got["k"], got["p"], got["m"]) == (
                    tenant_id,
                    value,
                    principal,
                    value,
                )
                assert not got["i"]
    finally:
        await db.close()


async def test_namespace_confinement_reads_the_same_with_an_empty_setting(
    pg_cluster: PgCluster,
) -> None:
    """brain_key_confines (0034): '' confines nothing, a list confines, evaluated either way."""
    conn = await asyncpg.connect(pg_cluster.owner_dsn)
    try:
        for setting, namespace, allowed in [
            ("", "any", True),
            ('{"a","b"}', "a", True),
            ('{"a","b"}', "c", False),
        ]:
            async with conn.transaction():
                await setlocal.set_local(conn, {"brain.confine_namespaces": setting})
                got = await conn.fetchval("SELECT brain_key_confines($1, '', '')", namespace)
                # What Citus evaluates early for a write: the ELSE branch's array, even for ''.
                early = await conn.fetchval(
                    "SELECT COALESCE(NULLIF(current_setting('brain.confine_namespaces', true),"
                    " ''), '{}')::text[]"
                )
            assert got is allowed, (setting, namespace)
            assert isinstance(early, list)
    finally:
        await conn.close()
