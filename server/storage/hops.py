"""SQL of the second retrieval round (``domain/retrieval/hops.py``): what the first
round's best hits say, read again through the caller's visibility."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from .graph import mention_time
from .memories import TimeCoords
from .visibility import Params, Visibility, asserting_memory_visible, visibility_predicate


async def hit_sources(
    conn: asyncpg.Connection,
    v: Visibility,
    t: TimeCoords,
    keys: Sequence[tuple[Any, Any, int]],
) -> list[tuple[str, list[str]]]:
    """(content, names of the entities it asserts) of the memory versions ``keys``
    (tenant, memory id, version) that ``v`` may see, in the order of ``keys``.

    Mentions are those of the version's memory in force at the search's transaction time
    (``mention_time``); a version the caller may not see gives nothing, so a hidden
    memory can never lend its names to a second round."""
    if not keys:
        return []
    tenants, ids, versions = (list(column) for column in zip(*keys, strict=True))
    p = Params(tenants, ids, versions)
    rows = await conn.fetch(
        f"""SELECT k.n, m.content,
                   ARRAY(SELECT x.name FROM graph_mentions x
                         WHERE x.tenant_id = m.tenant_id AND x.memory_id = m.memory_id
                           AND {mention_time(t, p, "x")}
                         ORDER BY x.name) AS names
            FROM unnest($1::uuid[], $2::uuid[], $3::int[]) WITH ORDINALITY
                 AS k (tenant_id, memory_id, version, n)
            JOIN memories m ON m.tenant_id = k.tenant_id AND m.memory_id = k.memory_id
                           AND m.version = k.version
            WHERE {visibility_predicate(v, p)}
            ORDER BY k.n""",
        *p.values,
    )
    return [(r["content"], list(r["names"])) for r in rows]


async def naming(
    conn: asyncpg.Connection,
    v: Visibility,
    t: TimeCoords,
    memory_ids: Sequence[Any],
    names: Sequence[str],
) -> frozenset[Any]:
    """Which of ``memory_ids`` (hits the caller was shown) assert an entity named (by
    normalised name or alias) in ``names``. Only those memories' own mentions are read."""
    if not memory_ids or not names:
        return frozenset()
    p = Params(list(memory_ids), sorted(set(names)))
    tenant = p.add(v.tenant_id)
    rows = await conn.fetch(
        f"""SELECT DISTINCT x.memory_id FROM graph_mentions x
            WHERE x.tenant_id = {tenant}::uuid AND x.memory_id = ANY ($1::uuid[])
              AND {mention_time(t, p, "x")}
              AND (x.alias_norms && $2::text[]
                   OR EXISTS (SELECT 1 FROM graph_entities e
                              WHERE e.tenant_id = {tenant}::uuid AND e.entity_id = x.entity_id
                                AND e.name_norm = ANY ($2::text[])))""",
        *p.values,
    )
    return frozenset(r["memory_id"] for r in rows)


async def people_seen(
    conn: asyncpg.Connection, v: Visibility, t: TimeCoords, names: Sequence[str]
) -> list[str]:
    """Which of ``names`` (normalised) is the name of an entity that a memory ``v`` may
    see asserts as a person (a mention of type ``person``, any case) at the search's
    transaction time; a person known only from hidden memories is no one here.

    Per entity found by name, its mentions are read until the first such one (LIMIT 1):
    a check per mention from the caller's memories instead read every visible memory's
    mentions (12-25 ms on a LoCoMo conversation, against under 1 ms)."""
    if not names:
        return []
    p = Params(sorted(set(names)))
    tenant = p.add(v.tenant_id)
    rows = await conn.fetch(
        f"""SELECT e.name_norm AS name FROM graph_entities e
            CROSS JOIN LATERAL (
                SELECT 1 FROM graph_mentions x
                WHERE x.tenant_id = {tenant}::uuid AND x.entity_id = e.entity_id
                  AND lower(x.type) = 'person' AND {mention_time(t, p, "x")}
                  AND {asserting_memory_visible(v, p, "x")}
                LIMIT 1) AS seen
            WHERE e.tenant_id = {tenant}::uuid AND e.name_norm = ANY ($1::text[])
            ORDER BY e.name_norm""",
        *p.values,
    )
    return [r["name"] for r in rows]
