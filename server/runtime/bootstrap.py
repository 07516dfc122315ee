"""One-time setup of the embedded cluster: database, app login role, migrations."""

from __future__ import annotations

import asyncpg

from brain.server.runtime.embedded import APP_LOGIN_ROLE, DATABASE, EmbeddedPostgres
from brain.server.storage.migrate import APP_GROUP_ROLE, migrate


async def prepare_embedded(pg: EmbeddedPostgres) -> None:
    """Create the database and the non-owner login role, then migrate as the owner."""
    conn = await asyncpg.connect(pg.bootstrap_dsn)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE):
            await conn.execute(f"CREATE DATABASE {DATABASE}")
        if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", APP_GROUP_ROLE):
            await conn.execute(f"CREATE ROLE {APP_GROUP_ROLE} NOLOGIN")
        if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", APP_LOGIN_ROLE):
            # NOSUPERUSER NOBYPASSRLS and owning nothing: RLS binds it.
            await conn.execute(
                f"CREATE ROLE {APP_LOGIN_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB "
                f"NOCREATEROLE IN ROLE {APP_GROUP_ROLE}"
            )
    finally:
        await conn.close()
    await migrate(pg.owner_dsn)
