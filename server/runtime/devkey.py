"""The local dev key that `make run` prints once, for trying the brain on one machine."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import asyncpg

from brain.authz import ALL_PERMISSIONS, Confinement
from brain.server.storage import admin

DEV_TENANT = "local"
DEV_PRINCIPAL = "dev"


async def ensure_dev_key(owner_dsn: str, pepper: bytes, path: Path) -> None:
    """Mint a full-permission key for tenant ``local`` unless ``path`` already holds one."""
    if path.exists():
        print(f"brain-server: dev key is in {path}", file=sys.stderr)
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
    print(
        f"\nbrain-server: minted a dev key for tenant '{DEV_TENANT}' (shown once, kept in {path}):"
        f"\n\n    {minted.key}\n",
        file=sys.stderr,
    )
