"""SQL for candidates: counts for the limits, pending duplicates, the review queue."""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg

from brain.server.storage import quotas as quota_sql
from brain.server.storage import setlocal
from brain.server.storage.memories import NewMemory, memory_columns
from brain.server.storage.visibility import Params, Visibility, visibility_predicate


async def pending_in_namespace(conn: asyncpg.Connection, tenant_id: str, namespace: str) -> int:
    """Every pending candidate in the namespace, also those the caller may not see (a cap
    that counted only visible ones would bind each proposer separately). Only the number
    crosses row-level security, through a definer function (migration 0007).

    Proposers in one namespace serialise here until commit, so concurrent proposals (the
    extractor's run in parallel) cannot all count the same free room."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        f"pending\x1f{tenant_id}\x1f{namespace}",
    )
    value: int = await conn.fetchval(
        "SELECT brain_pending_candidates($1::uuid, $2)", tenant_id, namespace
    )
    return value


async def visible_pending_in_namespace(
    conn: asyncpg.Connection, v: Visibility, namespace: str
) -> int:
    """The pending candidates of the namespace that ``v`` may see (its proposer's own, or
    every one for a reviewer) or reopened (`quotas.reopened_by`): the part of
    `pending_in_namespace` the caller knows of."""
    p = Params()
    return int(
        await conn.fetchval(
            f"""SELECT (SELECT count(*) FROM memories m
                WHERE m.tenant_id = {p.add(v.tenant_id)}::uuid
                  AND m.namespace = {p.add(namespace)} AND m.status = 'candidate'
                  AND m.retired_at IS NULL
                  AND (m.candidate_expires_at IS NULL OR m.candidate_expires_at > now())
                  AND {visibility_predicate(v, p)})
                 + {quota_sql.reopened_by(v, p, namespace, unexpired=True)}""",
            *p.values,
        )
    )


async def proposals_since(conn: asyncpg.Connection, key_id: str, since: datetime) -> int:
    """Proposals this key made since ``since``, reviewed or not (first versions persist),
    also those it can no longer see; only the transaction's own key may be counted
    (a definer function, migration 0056)."""
    value: int = await conn.fetchval(
        "SELECT brain_proposals_since($1::uuid, $2, $3)",
        await setlocal.current_tenant(conn),
        key_id,
        since,
    )
    return value


async def pending_duplicate(
    conn: asyncpg.Connection,
    v: Visibility,
    m: NewMemory,
    own_candidates_of: str | None = None,
) -> asyncpg.Record | None:
    """A visible, current memory holding ``m``'s value for the same readers (bucket and
    labels): an active one or a still-pending candidate. A proposal that supersedes
    duplicates only a pending candidate superseding the same memories (returning an active
    memory of that value would drop the supersede). With ``own_candidates_of``, only that
    principal's own pending candidates count."""
    p = Params(m.namespace, m.user_id, m.session_id, m.fingerprint, sorted(m.labels))
    pending = "m.status = 'candidate' AND m.candidate_expires_at > now()"
    if m.supersedes:
        replaced = p.add(sorted(m.supersedes))
        pending += f" AND m.supersedes @> {replaced}::uuid[] AND m.supersedes <@ {replaced}::uuid[]"
    if own_candidates_of is not None:
        states = f"({pending} AND m.created_by = {p.add(own_candidates_of)})"
    elif m.supersedes:
        states = f"({pending})"
    else:
        states = f"(m.status = 'active' OR ({pending}))"
    return await conn.fetchrow(
        f"""SELECT {memory_columns(v, p)} FROM memories m
            WHERE m.namespace = $1 AND m.user_id = $2 AND m.session_id = $3
              AND m.fingerprint = $4 AND m.labels @> $5::text[] AND m.labels <@ $5::text[]
              AND m.retired_at IS NULL AND {states}
              AND {visibility_predicate(v, p)}
            ORDER BY m.memory_id LIMIT 1""",
        *p.values,
    )


def every_target_visible(v: Visibility, p: Params, alias: str = "m") -> str:
    """SQL boolean over a candidate ``alias``: ``v`` sees every memory it would supersede.

    A reviewer who cannot see a target must not be able to learn that it exists, as its
    approval would tell (``supersedes: memory not found``): to such a reviewer the
    candidate is not in the review queue and not reviewable."""
    tenant = p.add(v.tenant_id)
    return f"""NOT EXISTS (
        SELECT 1 FROM unnest({alias}.supersedes) AS t (id)
        WHERE NOT EXISTS (
            SELECT 1 FROM memories x
            WHERE x.tenant_id = {tenant}::uuid AND x.memory_id = t.id
              AND x.retired_at IS NULL AND {visibility_predicate(v, p, "x")}))"""


async def sees_every_target(
    conn: asyncpg.Connection, v: Visibility, candidate: asyncpg.Record
) -> bool:
    """Whether ``v`` sees every memory ``candidate`` would supersede."""
    p = Params(candidate["memory_id"])
    return bool(
        await conn.fetchval(
            f"""SELECT {every_target_visible(v, p)} FROM memories m
                WHERE m.tenant_id = {p.add(v.tenant_id)}::uuid AND m.memory_id = $1
                  AND m.retired_at IS NULL""",
            *p.values,
        )
    )


async def candidates_page(
    conn: asyncpg.Connection,
    v: Visibility,
    proposed_by: str,
    after: uuid.UUID | None,
    limit: int,
) -> list[asyncpg.Record]:
    """Pending, unexpired candidates, newest first: the caller's own, and others' whose
    every supersede target it sees (``every_target_visible``)."""
    p = Params()
    clauses = [
        "m.status = 'candidate'",
        "m.retired_at IS NULL",
        "m.candidate_expires_at > now()",
        visibility_predicate(v, p),
        f"(m.created_by = {p.add(v.principal)} OR {every_target_visible(v, p)})",
    ]
    if proposed_by:
        clauses.append(f"m.created_by = {p.add(proposed_by)}")
    if after is not None:
        clauses.append(f"m.memory_id < {p.add(after)}")
    return list(
        await conn.fetch(
            f"""SELECT {memory_columns(v, p)} FROM memories m WHERE {" AND ".join(clauses)}
                ORDER BY m.memory_id DESC LIMIT {p.add(limit)}""",
            *p.values,
        )
    )


async def readmit_tombstone(conn: asyncpg.Connection, tombstone_id: uuid.UUID, by: str) -> None:
    await conn.execute(
        """UPDATE tombstones SET readmitted_at = now(), readmitted_by = $2
           WHERE tombstone_id = $1 AND readmitted_at IS NULL""",
        tombstone_id,
        by,
    )


async def namespace_policy(conn: asyncpg.Connection, namespace: str) -> asyncpg.Record | None:
    """The namespace's review policy. The tenant is named (RLS adds it too, but Citus's
    planner routes a statement to one shard only by a tenant it can see)."""
    return await conn.fetchrow(
        "SELECT review_required, candidate_ttl, max_pending FROM namespace_policies "
        "WHERE tenant_id = $1::uuid AND namespace = $2",
        await setlocal.current_tenant(conn),
        namespace,
    )
