"""The local dev key that `make run` writes to ``.brain/dev-key``, for trying the brain on one
machine.

The key itself goes only into that file (mode 0600); the log, which may be shipped and kept,
names the file, never the key (Configuration: logs never carry keys).
"""

from __future__ import annotations

import os
from pathlib import Path

import asyncpg
import structlog

from brain.authz import ALL_PERMISSIONS, Confinement
from brain.server.storage import admin

DEV_TENANT = "local"
DEV_PRINCIPAL = "dev"
_log = structlog.get_logger("brain.server")


async def ensure_dev_key(owner_dsn: str, pepper: bytes, path: Path) -> None:
    """Mint a full-permission key for tenant ``local`` unless ``path`` already holds one."""
    if path.exists():
        _log.info("dev key", tenant=DEV_TENANT, key_file=str(path))
        return
    conn = await asyncpg.connect(owner_dsn)
    try:
        async with conn.transaction():
            exists = await conn.fetchval("SELECT 1 FROM tenants WHERE name = $1", DEV_TENANT)
            if not exists:
                await admin.create_tenant(conn, DEV_TENANT)
            minted = await admin.mint_key(
                conn,
                pepper,
                tenant=DEV_TENANT,
                principal=DEV_PRINCIPAL,
                permissions=ALL_PERMISSIONS,
                confinement=Confinement(),
                labels=frozenset({"team"}),
                expires_at=None,
                description="local dev key minted by make run",
            )
    finally:
        await conn.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(minted.key + "\n")
    _log.info(
        "minted a dev key; clients read it from the file (BRAIN_API_KEY=$(cat FILE))",
        tenant=DEV_TENANT,
        key_file=str(path),
    )
