"""Tenants and keys, written by brain-admin through the owner role."""

from __future__ import annotations

import contextlib
import uuid
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from brain.authz import Confinement, format_key, hash_secret, new_key_id, new_secret


class AdminError(Exception):
    """An admin command cannot be carried out as asked."""


@dataclass(frozen=True)
class MintedKey:
    key: str
    key_id: str
    tenant_id: str
    tenant_name: str
    principal: str
    permissions: list[str]
    confinement: Confinement
    labels: list[str]
    expires_at: datetime | None


async def create_tenant(conn: asyncpg.Connection, name: str) -> str:
    tenant_id = uuid.uuid4()
    try:
        await conn.execute("INSERT INTO tenants (tenant_id, name) VALUES ($1, $2)", tenant_id, name)
    except asyncpg.UniqueViolationError as exc:
        raise AdminError(f"tenant {name!r} already exists") from exc
    except asyncpg.CheckViolationError as exc:
        raise AdminError(
            f"tenant name {name!r} must be 1-64 letters, digits, '.', '_' or '-'"
        ) from exc
    return str(tenant_id)


async def tenant_id_by_name(conn: asyncpg.Connection, name: str) -> str:
    tid = await conn.fetchval("SELECT tenant_id FROM tenants WHERE name = $1", name)
    if tid is None:
        raise AdminError(f"no tenant named {name!r}; create it with `brain-admin tenants create`")
    return str(tid)


async def mint_key(
    conn: asyncpg.Connection,
    pepper: bytes,
    *,
    tenant: str,
    principal: str,
    permissions: frozenset[str],
    confinement: Confinement,
    labels: frozenset[str],
    expires_at: datetime | None,
    description: str = "",
    rotated_from: str | None = None,
) -> MintedKey:
    """Create a key and return it with its secret — the only time the secret exists."""
    tenant_id = await tenant_id_by_name(conn, tenant)
    key_id, secret = new_key_id(), new_secret()
    # The key and its tenant entry, both or neither (in the caller's transaction, if any).
    together: AbstractAsyncContextManager[Any] = (
        contextlib.nullcontext() if conn.is_in_transaction() else conn.transaction()
    )
    async with together:
        # Which tenant holds the key, read to authenticate it without asking every shard of
        # api_keys on a Citus cluster (migration 0061; api_keys' foreign key requires it).
        await conn.execute(
            "INSERT INTO api_key_tenants (key_id, tenant_id) VALUES ($1, $2::uuid)",
            key_id,
            tenant_id,
        )
        await conn.execute(
            """INSERT INTO api_keys (tenant_id, key_id, secret_hash, principal, permissions,
                   confine_user_id, confine_namespaces, confine_session_id, labels,
                   expires_at, description, rotated_from)
               VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)""",
            tenant_id,
            key_id,
            hash_secret(pepper, key_id, secret),
            principal,
            sorted(permissions),
            confinement.user_id,
            sorted(confinement.namespaces),
            confinement.session_id,
            sorted(labels),
            expires_at,
            description,
            rotated_from,
        )
    return MintedKey(
        key=format_key(key_id, secret),
        key_id=key_id,
        tenant_id=tenant_id,
        tenant_name=tenant,
        principal=principal,
        permissions=sorted(permissions),
        confinement=confinement,
        labels=sorted(labels),
        expires_at=expires_at,
    )


async def list_keys(conn: asyncpg.Connection, tenant: str | None) -> list[asyncpg.Record]:
    """Keys without secrets or hashes."""
    return list(
        await conn.fetch(
            """SELECT t.name AS tenant, k.key_id, k.principal, k.permissions, k.confine_user_id,
                      k.confine_namespaces, k.confine_session_id, k.labels, k.created_at,
                      k.expires_at, k.revoked_at, k.last_used_at, k.rotated_from, k.description
               FROM api_keys k JOIN tenants t USING (tenant_id)
               WHERE $1::text IS NULL OR t.name = $1
               ORDER BY t.name, k.created_at""",
            tenant,
        )
    )


async def key_tenant(conn: asyncpg.Connection, key_id: str) -> str:
    """The tenant holding a key (migration 0061's api_key_tenants): the statements that
    follow name it, so on Citus they read or write one shard of api_keys, not all of them
    (and a transaction that then mints a key may write the reference table: Citus refuses
    that after a parallel read of every shard)."""
    tenant_id = await conn.fetchval(
        "SELECT tenant_id FROM api_key_tenants WHERE key_id = $1", key_id
    )
    if tenant_id is None:
        raise AdminError(f"no key with id {key_id!r}")
    return str(tenant_id)


async def revoke_key(conn: asyncpg.Connection, key_id: str, at: datetime | None = None) -> None:
    # The time is read first, not written as COALESCE($2, now()): where Citus evaluates a
    # statement itself it refuses a non-immutable call inside COALESCE or CASE.
    tenant_id = await key_tenant(conn, key_id)
    if at is None:
        at = await conn.fetchval("SELECT now()")
    status = await conn.execute(
        "UPDATE api_keys SET revoked_at = $3 WHERE tenant_id = $1::uuid AND key_id = $2 "
        "AND (revoked_at IS NULL OR revoked_at > $3)",
        tenant_id,
        key_id,
        at,
    )
    if status == "UPDATE 0":
        exists = await conn.fetchval(
            "SELECT 1 FROM api_keys WHERE tenant_id = $1::uuid AND key_id = $2", tenant_id, key_id
        )
        if not exists:
            raise AdminError(f"no key with id {key_id!r}")


async def key_row(conn: asyncpg.Connection, key_id: str) -> asyncpg.Record:
    tenant_id = await key_tenant(conn, key_id)
    row = await conn.fetchrow(
        """SELECT t.name AS tenant, k.* FROM api_keys k JOIN tenants t USING (tenant_id)
           WHERE k.tenant_id = $1::uuid AND k.key_id = $2""",
        tenant_id,
        key_id,
    )
    if row is None:
        raise AdminError(f"no key with id {key_id!r}")
    return row


QUOTA_COLUMNS = {
    "memories": "max_memories",
    "documents": "max_documents",
    "document_bytes": "max_document_bytes",
}


async def set_quotas(
    conn: asyncpg.Connection, tenant: str, limits: dict[str, int | None]
) -> tuple[str, dict[str, int | None]]:
    """Set (or, with None, lift) the named limits of a tenant (keys of ``QUOTA_COLUMNS``),
    leaving the others as they are; its id and all its limits back."""
    for name, limit in limits.items():
        if name not in QUOTA_COLUMNS:
            raise AdminError(f"unknown quota {name!r}; choose from {sorted(QUOTA_COLUMNS)}")
        if limit is not None and limit < 0:
            raise AdminError(f"--{name.replace('_', '-')} must be 0 or more, or 'none'")
    tenant_id = await tenant_id_by_name(conn, tenant)
    columns = [QUOTA_COLUMNS[n] for n in limits]
    # The clock is read first: Citus takes only immutable calls in DO UPDATE SET.
    now = await conn.fetchval("SELECT now()")
    row = await conn.fetchrow(
        f"""INSERT INTO tenant_quotas (tenant_id, {", ".join(columns)})
            VALUES ($1::uuid, {", ".join(f"${i + 2}" for i in range(len(columns)))})
            ON CONFLICT (tenant_id) DO UPDATE
            SET {", ".join(f"{c} = EXCLUDED.{c}" for c in columns)},
                updated_at = ${len(columns) + 2}::timestamptz
            RETURNING {", ".join(QUOTA_COLUMNS.values())}""",
        tenant_id,
        *limits.values(),
        now,
    )
    assert row is not None
    return tenant_id, {name: row[column] for name, column in QUOTA_COLUMNS.items()}


async def list_tenants(conn: asyncpg.Connection) -> list[dict[str, Any]]:
    """Every tenant with its quotas (NULL: unlimited) and what it stores.

    Read tenant by tenant, not by `tenants LEFT JOIN tenant_quotas`: on Citus that outer
    join of a reference table with a distributed one is suspected of losing a tenant
    isolated to shards of its own (storage/audit.py `tenants`)."""
    out = []
    for t in await conn.fetch("SELECT tenant_id, name, created_at FROM tenants ORDER BY name"):
        quotas = await conn.fetchrow(
            """SELECT max_memories, max_documents, max_document_bytes FROM tenant_quotas
               WHERE tenant_id = $1""",
            t["tenant_id"],
        )
        used = await conn.fetchrow(
            """SELECT brain_memories_used($1) AS memories, d.documents, d.document_bytes
               FROM brain_documents_used($1) d""",
            t["tenant_id"],
        )
        assert used is not None  # an aggregate: always one row
        out.append(
            {
                **dict(t),
                **{c: quotas[c] if quotas else None for c in QUOTA_COLUMNS.values()},
                **dict(used),
            }
        )
    return out
