"""A pool connection carries nothing from one request to the next.

The server's pools release a connection without asyncpg's reset query (one round trip per
checkout saved; storage/db.py ``_keep_session``). That is safe only while everything a
request sets on its connection ends with its transaction. These tests hold the server to
it: a request's settings are gone at the next checkout of the same backend, and no code
that runs on a pool connection sets session state.
"""

from __future__ import annotations

import re
from pathlib import Path

from brain.authz import Confinement
from brain.server.storage.db import Database

from .conftest import LoopThread, PgCluster, unique

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = (
    "brain.tenant_id",
    "brain.key_id",
    "brain.principal",
    "brain.labels",
    "brain.confine_user_id",
    "brain.confine_namespaces",
    "brain.may_review",
)
READ = "SELECT pg_backend_pid() AS pid, " + ", ".join(
    f"current_setting('{name}', true) AS s{i}" for i, name in enumerate(SETTINGS)
)


def test_a_requests_settings_end_with_its_transaction(
    pg_cluster: PgCluster, loop_thread: LoopThread
) -> None:
    tenant = "00000000-0000-4000-8000-" + unique("t")[-8:].rjust(12, "0")

    async def run() -> tuple[dict[str, str | None], int, dict[str, str | None], int]:
        db = await Database.connect(pg_cluster.app_dsn, min_size=1, max_size=1)
        try:
            confinement = Confinement(
                user_id="alice", namespaces=frozenset({"ns"}), session_id="s1"
            )
            async with db.tenant_tx(
                tenant,
                key_id="k1",
                principal="agent:a",
                labels=frozenset({"team"}),
                confinement=confinement,
                may_review=True,
            ) as conn:
                inside = await conn.fetchrow(READ)
                await conn.execute("SELECT pg_advisory_xact_lock(42)")
            async with db.pool.acquire() as conn:  # max_size=1: the same backend
                after = await conn.fetchrow(READ)
                locks = await conn.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1",
                    after["pid"],
                )
                assert not conn.is_in_transaction()
            assert locks == 0
            return (
                {n: inside[f"s{i}"] for i, n in enumerate(SETTINGS)},
                inside["pid"],
                {n: after[f"s{i}"] for i, n in enumerate(SETTINGS)},
                after["pid"],
            )
        finally:
            await db.close()

    inside, pid_inside, after, pid_after = loop_thread.run(run())
    # Positive control: within the request every setting held its value...
    assert inside["brain.tenant_id"] == tenant
    assert inside["brain.confine_user_id"] == "alice"
    assert inside["brain.may_review"] == "on"
    # ...and the next checkout of that very backend sees none of them.
    assert pid_after == pid_inside
    assert all(value in (None, "") for value in after.values()), after


# Statements that would leave state on a connection past its transaction.
SESSION_STATE = re.compile(
    r"""\bSET\s+(?!LOCAL\b)(SESSION\s+)?[a-z_]+(\.[a-z_]+)?\s*(=|\bTO\b)"""
    r"""|set_config\([^)]*,\s*false\s*\)"""
    r"""|pg_advisory_lock\(|pg_advisory_lock_shared\("""
    r"""|\bLISTEN\s"""
    r"""|\bWITH\s+HOLD\b"""  # SQL keywords are upper case in this code base
)
# Where session state is set on purpose, on connections of their own (never a server pool):
# the migration runner's advisory lock, the change feed's LISTEN connection, brain-bench's
# index build settings, the embedded cluster's ALTER SYSTEM.
OWN_CONNECTIONS = {
    "server/storage/migrate.py",
    "server/domain/watch.py",
    "server/measure/synthetic.py",
    "server/runtime/embedded.py",
}


def test_no_code_on_a_pool_connection_sets_session_state() -> None:
    found = []
    scanned = 0
    for path in sorted((ROOT / "server").rglob("*.py")) + sorted((ROOT / "authz").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if "/migrations/" in rel or rel in OWN_CONNECTIONS:
            continue
        scanned += 1
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if SESSION_STATE.search(line) and "UPDATE" not in line.upper():
                found.append(f"{rel}:{number}: {line.strip()}")
    assert scanned > 50
    assert found == [], "session state on a pooled connection:\n" + "\n".join(found)
    # The pattern finds what it is for (a positive control on the rule itself).
    for bad in (
        "SET statement_timeout = 5",
        "SET SESSION brain.tenant_id TO 'x'",
        "SELECT set_config('brain.tenant_id', $1, false)",
        "SELECT pg_advisory_lock(1)",
        "LISTEN brain_changes",
    ):
        assert SESSION_STATE.search(bad), bad
    assert not SESSION_STATE.search("SET LOCAL brain.tenant_id = 'x'")
