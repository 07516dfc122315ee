"""Lexical search reaches its GIN indexes under row-level security.

PostgreSQL runs a query's own condition before the row-level security policies (and so
as an index condition) only when its function is LEAKPROOF; `migrate` marks text match
so (see `storage.migrate.TEXT_MATCH`). Without it every lexical search reads the whole
table, which no functional test notices: this one reads the plan.
"""

from __future__ import annotations

import asyncpg

from brain.server.measure.synthetic import fill
from brain.server.runtime import embedded
from brain.server.storage import admin, migrate

from .conftest import PgCluster, unique

# The candidate read of a lexical lane: rows holding a rare term, through the index.
CANDIDATES = "EXPLAIN SELECT m.memory_id FROM memories m WHERE m.search_tsv @@ 'w19999'::tsquery"


async def plan_as_app(conn: asyncpg.Connection, tenant_id: str) -> str:
    """The plan the app role gets for one tenant (row-level security on)."""
    await conn.execute(f"SET LOCAL ROLE {embedded.APP_LOGIN_ROLE}")
    await conn.execute("SELECT set_config('brain.tenant_id', $1, true)", tenant_id)
    return "\n".join(r[0] for r in await conn.fetch(CANDIDATES))


async def test_text_match_uses_the_gin_index_under_row_level_security(
    pg_cluster: PgCluster,
) -> None:
    dsn = pg_cluster.embedded_pg.owner_dsn
    conn = await asyncpg.connect(dsn)
    try:
        tenant = unique("plan")
        tenant_id = str(await admin.create_tenant(conn, tenant))
        await fill(dsn, tenant, 3000, 0)  # a bucket where a rare term is worth an index
        assert await migrate.text_match_is_leakproof(conn)
        async with conn.transaction():
            plan = await plan_as_app(conn, tenant_id)
            assert "Bitmap Index Scan on memories_tsv" in plan, plan
        # Control: unmarked (as PostgreSQL ships it, inside a transaction rolled back),
        # the same query as the same role cannot use the index at all.
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.execute(f"ALTER FUNCTION {migrate.TEXT_MATCH} NOT LEAKPROOF")
            plan = await plan_as_app(conn, tenant_id)
            assert "memories_tsv" not in plan and "search_tsv @@" in plan, plan
        finally:
            await tx.rollback()
        assert await migrate.text_match_is_leakproof(conn)
    finally:
        await conn.close()


async def test_migrate_marks_text_match_again(pg_cluster: PgCluster) -> None:
    """A database whose catalog lost the mark (restored into a new cluster) gets it back
    on the next `brain-admin migrate`; the server warns until then."""
    dsn = pg_cluster.embedded_pg.owner_dsn
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"ALTER FUNCTION {migrate.TEXT_MATCH} NOT LEAKPROOF")
        assert not await migrate.text_match_is_leakproof(conn)
        await migrate.migrate(dsn)
        assert await migrate.text_match_is_leakproof(conn)
    finally:
        await conn.execute(migrate.MARK_TEXT_MATCH)
        await conn.close()
