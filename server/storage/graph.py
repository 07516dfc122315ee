"""SQL for the entity graph (migration 0030). Every read embeds the visibility of the
memories that assert what it returns (``asserting_memory_visible``), before any LIMIT."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from brain.server.storage import setlocal

from .memories import RANKING_COLUMNS, RowFilter, TimeCoords, filter_predicate, time_predicate
from .visibility import (
    Params,
    Visibility,
    asserting_memory_visible,
    visibility_predicate,
    write_predicate,
)


@dataclass(frozen=True, slots=True)
class NewMention:
    name_norm: str
    name: str
    type: str
    aliases: tuple[str, ...]
    alias_norms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NewRelation:
    subject: str  # normalised entity names
    predicate: str
    object: str
    cardinality: str  # 'one' | 'many'
    valid_from: datetime
    valid_to: datetime | None


def mention_time(t: TimeCoords, p: Params, alias: str) -> str:
    """Transaction time only: a mention has no valid time of its own."""
    a = alias
    if t.as_of is None:
        return f"{a}.retired_at IS NULL AND NOT {a}.pending"
    at = p.add(t.as_of)
    return (
        f"NOT {a}.pending AND {a}.recorded_at <= {at} "
        f"AND ({a}.retired_at IS NULL OR {a}.retired_at > {at})"
    )


def relation_time(t: TimeCoords, p: Params, alias: str) -> str:
    return f"NOT {alias}.pending AND {time_predicate(t, p, alias)}"


# -- writes ------------------------------------------------------------------------


async def entity_ids(conn: asyncpg.Connection, names: Sequence[str]) -> dict[str, uuid.UUID]:
    """Ids of these normalised names in the caller's tenant (created when missing)."""
    rows = await conn.fetch(
        "SELECT * FROM brain_graph_entities($1::uuid, $2::text[])",
        await setlocal.current_tenant(conn),
        sorted(set(names)),
    )
    return {r["name_norm"]: r["entity_id"] for r in rows}


async def insert_mentions(
    conn: asyncpg.Connection,
    tenant_id: Any,
    memory_id: uuid.UUID,
    mentions: Sequence[NewMention],
    ids: dict[str, uuid.UUID],
    at: datetime,
    pending: bool,
) -> None:
    await conn.executemany(
        """INSERT INTO graph_mentions (tenant_id, mention_id, memory_id, entity_id, name, type,
                                       aliases, alias_norms, pending, recorded_at)
           VALUES ($1::uuid, gen_random_uuid(), $2, $3, $4, $5, $6, $7, $8, $9)""",
        [
            (str(tenant_id), memory_id, ids[m.name_norm], m.name, m.type, list(m.aliases),
             list(m.alias_norms), pending, at)
            for m in mentions
        ],
    )  # fmt: skip


async def insert_relations(
    conn: asyncpg.Connection,
    tenant_id: Any,
    memory_id: uuid.UUID,
    relations: Sequence[NewRelation],
    ids: dict[str, uuid.UUID],
    at: datetime,
    pending: bool,
    writer: tuple[str | None, str | None] = (None, None),
) -> None:
    """``writer`` is the write confinement (user, session; None = not confined) of the
    key that proposed pending relations: approval closes only what that key could."""
    await conn.executemany(
        """INSERT INTO graph_relations (tenant_id, relation_id, memory_id, subject_id, predicate,
                                        object_id, cardinality, valid_from, valid_to, pending,
                                        recorded_at, writer_user, writer_session)
           VALUES ($1::uuid, gen_random_uuid(), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)""",
        [
            (str(tenant_id), memory_id, ids[r.subject], r.predicate, ids[r.object],
             r.cardinality, r.valid_from, r.valid_to, pending, at, *writer)
            for r in relations
        ],
    )  # fmt: skip


# SQL boolean over the new memory ``nm`` and the current version ``om`` of a memory
# whose fact it would close: every caller who can see ``om`` can also see ``nm``. It
# follows `visibility_predicate` term by term: the same namespace; a user (and a session)
# sees the shared rows and its own, so ``nm`` must be shared or in ``om``'s user (session);
# a key reads a memory holding any one of its labels, so ``nm`` must hold every label
# ``om`` holds; ``nm`` must be admitted and expire no earlier.
SAME_READERS = (
    "(nm.status = 'active' AND om.namespace = nm.namespace"
    " AND nm.user_id IN ('', om.user_id) AND nm.session_id IN ('', om.session_id)"
    " AND nm.labels @> om.labels"
    " AND (nm.expires_at IS NULL"
    "      OR (om.expires_at IS NOT NULL AND om.expires_at <= nm.expires_at)))"
)


# Keyed lookups. The statements every graph write runs read a tenant's graph by keys, in
# an order the planner cannot change: every table names the tenant (every index leads
# with it); the rows the write itself asserts are read first (MATERIALIZED, once); each
# further table is probed per such row by its key, in a LATERAL ... OFFSET 0 fence that
# keeps it a correlated probe (never pulled up into a join, never hashed); a memory's
# scope and status are tested outside the fence, so that no index of those columns (a
# namespace's, say) can pass for the key's. Left to itself, on tables without
# statistics (a new database; a tenant grown since the last ANALYZE) PostgreSQL estimated
# one row per tenant and nested whole-tenant scans whose every row row-level security
# checks with a definer call (brain_key_may_see_head): approving a slot change read
# ~400,000 buffers and made ~10,000 such calls at 90 relations, growing with their cube.
async def close_predecessors(
    conn: asyncpg.Connection,
    v: Visibility | None,
    tenant_id: Any,
    memory_id: uuid.UUID,
    at: datetime,
) -> int:
    """For each single-valued relation ``memory_id`` now asserts, close the valid time of
    the earlier current facts of the same subject and predicate with another object.

    A fact is closed only when every caller who can see it can also see the new one
    (`same_readers`), so a close never writes an invisible fact's time into a visible
    one; otherwise both stay open, as for a many-valued relation. And only facts the
    writer may change: with ``v`` (a direct write) those it can see and change; on
    approval (``v`` None) those the proposer's write confinement, kept on its relations,
    covered — never the reviewer's. Closing is bitemporal: the old row is retired at
    ``at`` and a copy recorded whose valid time ends where the new fact begins
    (``closed_by`` the new memory, so erasing it reopens the fact).

    Its cost follows the memory's own relations and the facts of their subjects, not
    the tenant's size (see "Keyed lookups" above)."""
    p = Params(memory_id, tenant_id)
    if v is not None:
        power = f"{visibility_predicate(v, p, 'om')} AND {write_predicate(v, p, 'om')}"
    else:
        power = (
            "(nw.writer_user IS NULL OR om.user_id = nw.writer_user)"
            " AND (nw.writer_session IS NULL OR om.session_id = nw.writer_session)"
        )
    closing = await conn.fetch(
        f"""WITH new AS MATERIALIZED (
                SELECT n.subject_id, n.predicate, n.object_id, n.valid_from, n.writer_user,
                       n.writer_session
                FROM graph_relations n
                WHERE n.tenant_id = $2::uuid AND n.memory_id = $1 AND n.cardinality = 'one'
                  AND n.retired_at IS NULL AND NOT n.pending),
            nm AS MATERIALIZED (
                SELECT nm.* FROM memories nm
                WHERE nm.tenant_id = $2::uuid AND nm.memory_id = $1 AND nm.retired_at IS NULL)
            SELECT DISTINCT ON (o.relation_id) o.relation_id, nw.valid_from AS ends
            FROM new nw
            CROSS JOIN LATERAL (
                SELECT o.relation_id, o.memory_id FROM graph_relations o
                WHERE o.tenant_id = $2::uuid AND o.subject_id = nw.subject_id
                  AND o.predicate = nw.predicate AND o.object_id <> nw.object_id
                  AND o.memory_id <> $1 AND o.retired_at IS NULL AND NOT o.pending
                  AND o.valid_from < nw.valid_from
                  AND (o.valid_to IS NULL OR o.valid_to > nw.valid_from)
                OFFSET 0) o
            CROSS JOIN LATERAL (
                SELECT om.* FROM memories om
                WHERE om.tenant_id = $2::uuid AND om.memory_id = o.memory_id
                  AND om.retired_at IS NULL
                OFFSET 0) om
            CROSS JOIN nm
            WHERE {SAME_READERS} AND {power}
            ORDER BY o.relation_id, nw.valid_from""",
        *p.values,
    )
    if not closing:
        return 0
    # The ids travel as an array of known length, so the rows are found by primary key
    # (an UPDATE joined to a CTE may scan the tenant's relations, each checked by RLS).
    # Same transaction; a row another write retired meanwhile is skipped, copy and all.
    # Two statements, each on the tenant's shard alone: Citus would run an INSERT fed by
    # a modifying CTE through the coordinator, over every node.
    retired = await conn.fetch(
        """UPDATE graph_relations o SET retired_at = $2
           WHERE o.tenant_id = $1::uuid AND o.relation_id = ANY ($3::uuid[])
             AND o.retired_at IS NULL AND NOT o.pending
           RETURNING o.relation_id, o.memory_id, o.subject_id, o.predicate, o.object_id,
                     o.cardinality, o.valid_from""",
        tenant_id,
        at,
        [r["relation_id"] for r in closing],
    )
    if not retired:
        return 0
    ends = {r["relation_id"]: r["ends"] for r in closing}
    p = Params(tenant_id, at, memory_id)
    values = ", ".join(
        f"($1::uuid, {p.add(uuid.uuid4())}::uuid, {p.add(r['memory_id'])}::uuid, "
        f"{p.add(r['subject_id'])}::uuid, {p.add(r['predicate'])}, {p.add(r['object_id'])}::uuid, "
        f"{p.add(r['cardinality'])}, {p.add(r['valid_from'])}::timestamptz, "
        f"{p.add(ends[r['relation_id']])}::timestamptz, false, $2::timestamptz, $3::uuid, "
        f"{p.add(r['relation_id'])}::uuid)"
        for r in sorted(retired, key=lambda r: r["relation_id"])
    )
    await conn.execute(
        f"""INSERT INTO graph_relations (tenant_id, relation_id, memory_id, subject_id,
                                         predicate, object_id, cardinality, valid_from,
                                         valid_to, pending, recorded_at, closed_by, replaces)
            VALUES {values}""",
        *p.values,
    )
    return len(retired)


async def reopen(conn: asyncpg.Connection, memory_id: uuid.UUID, *, closed: bool) -> None:
    """Undo the closes the memory made, and with ``closed`` those of its own facts."""
    await conn.execute(
        "SELECT brain_graph_reopen($1::uuid, $2, $3)",
        await setlocal.current_tenant(conn),
        memory_id,
        closed,
    )


async def retire_memory(
    conn: asyncpg.Connection, tenant_id: Any, memory_id: uuid.UUID, at: datetime
) -> None:
    """The memory's current graph rows stop being believed at ``at`` (supersede, update)."""
    for table in ("graph_mentions", "graph_relations"):
        await conn.execute(
            f"""UPDATE {table} SET retired_at = $3
                WHERE tenant_id = $1 AND memory_id = $2 AND retired_at IS NULL""",
            tenant_id,
            memory_id,
            at,
        )


async def activate_memory(
    conn: asyncpg.Connection, tenant_id: Any, memory_id: uuid.UUID, at: datetime
) -> None:
    """An approved proposal's rows join the graph, believed from the approval on."""
    for table in ("graph_mentions", "graph_relations"):
        await conn.execute(
            f"""UPDATE {table} SET pending = false, recorded_at = $3
                WHERE tenant_id = $1 AND memory_id = $2 AND pending AND retired_at IS NULL""",
            tenant_id,
            memory_id,
            at,
        )


async def erase_memory(conn: asyncpg.Connection, tenant_id: Any, memory_id: uuid.UUID) -> None:
    """Forget: reopen the facts the memory's relations closed, delete every graph row it
    asserted, in every version, then every entity no memory asserts any more (its name
    with it)."""
    await reopen(conn, memory_id, closed=False)  # undo its closes
    entities: set[uuid.UUID] = set()
    rows = await conn.fetch(
        "DELETE FROM graph_relations WHERE tenant_id = $1 AND memory_id = $2 "
        "RETURNING subject_id, object_id",
        tenant_id,
        memory_id,
    )
    for r in rows:
        entities.update((r["subject_id"], r["object_id"]))
    rows = await conn.fetch(
        "DELETE FROM graph_mentions WHERE tenant_id = $1 AND memory_id = $2 RETURNING entity_id",
        tenant_id,
        memory_id,
    )
    entities.update(r["entity_id"] for r in rows)
    if entities:
        await conn.execute(
            "SELECT brain_graph_drop_orphans($1::uuid, $2::uuid[])",
            await setlocal.current_tenant(conn),
            sorted(entities),
        )


# -- reads -------------------------------------------------------------------------


async def find_entity(
    conn: asyncpg.Connection, v: Visibility, name_norm: str, t: TimeCoords
) -> uuid.UUID | None:
    """The entity a visible mention gives this name or alias (a name match first)."""
    p = Params(name_norm, v.tenant_id)
    value: uuid.UUID | None = await conn.fetchval(
        f"""WITH named AS (
                SELECT e.entity_id, true AS by_name FROM graph_entities e
                WHERE e.tenant_id = $2::uuid AND e.name_norm = $1
                UNION ALL
                SELECT a.entity_id, false FROM graph_mentions a
                WHERE a.tenant_id = $2::uuid AND a.alias_norms @> ARRAY[$1]::text[])
            SELECT n.entity_id FROM named n
            WHERE EXISTS (SELECT 1 FROM graph_mentions x
                          WHERE x.tenant_id = $2::uuid AND x.entity_id = n.entity_id
                            AND (n.by_name OR x.alias_norms @> ARRAY[$1]::text[])
                            AND {mention_time(t, p, "x")}
                            AND {asserting_memory_visible(v, p, "x")})
            ORDER BY n.by_name DESC, n.entity_id
            LIMIT 1""",
        *p.values,
    )
    return value


async def summaries(
    conn: asyncpg.Connection, v: Visibility, entity_ids: Sequence[uuid.UUID], t: TimeCoords
) -> dict[uuid.UUID, asyncpg.Record]:
    """Name, types, aliases, mention count and degree of each entity, over visible
    mentions and relations at ``t`` only."""
    p = Params(list(entity_ids), v.tenant_id)
    rows = await conn.fetch(
        f"""WITH seen AS (
                SELECT x.* FROM graph_mentions x
                WHERE x.tenant_id = $2::uuid AND x.entity_id = ANY($1::uuid[])
                  AND {mention_time(t, p, "x")}
                  AND {asserting_memory_visible(v, p, "x")}),
            named AS (
                SELECT DISTINCT ON (entity_id) entity_id, name FROM seen
                ORDER BY entity_id, recorded_at DESC, name),
            rel AS (
                SELECT e.id AS entity_id, count(r.*) AS degree
                FROM unnest($1::uuid[]) AS e (id)
                JOIN graph_relations r ON r.tenant_id = $2::uuid
                     AND (r.subject_id = e.id OR r.object_id = e.id)
                WHERE {relation_time(t, p, "r")} AND {asserting_memory_visible(v, p, "r")}
                GROUP BY e.id)
            SELECT s.entity_id, n.name,
                   (SELECT e.name_norm FROM graph_entities e
                    WHERE e.tenant_id = $2::uuid AND e.entity_id = s.entity_id) AS name_norm,
                   array_remove(array_agg(DISTINCT s.type), '') AS types,
                   ARRAY(SELECT DISTINCT a FROM seen s2, unnest(s2.aliases) a
                         WHERE s2.entity_id = s.entity_id ORDER BY a) AS aliases,
                   count(DISTINCT s.memory_id) AS mention_count,
                   COALESCE(max(rel.degree), 0) AS degree
            FROM seen s JOIN named n USING (entity_id)
            LEFT JOIN rel USING (entity_id)
            GROUP BY s.entity_id, n.name""",
        *p.values,
    )
    return {r["entity_id"]: r for r in rows}


def _relation_columns(tenant: str) -> str:
    """A relation's columns and its endpoints' names; the name lookups read ``tenant``
    (the statement's tenant parameter: on Citus a subquery correlated on ``r.tenant_id``
    would take the statement off its one shard)."""
    return f"""r.relation_id, r.memory_id, r.subject_id, r.predicate, r.object_id,
    r.cardinality, r.valid_from, r.valid_to, r.recorded_at, r.retired_at,
    (SELECT y.name FROM graph_mentions y WHERE y.tenant_id = {tenant}::uuid
       AND y.memory_id = r.memory_id AND y.entity_id = r.subject_id
     ORDER BY y.recorded_at DESC LIMIT 1) AS subject_name,
    (SELECT y.name FROM graph_mentions y WHERE y.tenant_id = {tenant}::uuid
       AND y.memory_id = r.memory_id AND y.entity_id = r.object_id
     ORDER BY y.recorded_at DESC LIMIT 1) AS object_name,
    (SELECT e.name_norm FROM graph_entities e WHERE e.tenant_id = {tenant}::uuid
       AND e.entity_id = r.subject_id) AS subject_norm,
    (SELECT e.name_norm FROM graph_entities e WHERE e.tenant_id = {tenant}::uuid
       AND e.entity_id = r.object_id) AS object_norm"""


async def relations_of(
    conn: asyncpg.Connection, v: Visibility, entity_id: uuid.UUID, t: TimeCoords, limit: int
) -> list[asyncpg.Record]:
    """Visible relations of one entity at ``t``, newest valid time first. Endpoint names
    come from the asserting memory's own mentions."""
    p = Params(entity_id, v.tenant_id)
    return list(
        await conn.fetch(
            f"""SELECT {_relation_columns("$2")} FROM graph_relations r
                WHERE r.tenant_id = $2::uuid AND (r.subject_id = $1 OR r.object_id = $1)
                  AND {relation_time(t, p, "r")} AND {asserting_memory_visible(v, p, "r")}
                ORDER BY r.valid_from DESC, r.recorded_at DESC, r.relation_id
                LIMIT {p.add(limit)}""",
            *p.values,
        )
    )


async def neighbours(
    conn: asyncpg.Connection,
    v: Visibility,
    start: uuid.UUID,
    depth: int,
    t: TimeCoords,
    limit: int,
    max_paths: int,
) -> list[asyncpg.Record]:
    """Entities within ``depth`` hops over visible relations at ``t``, nearest first.

    Every step of the walk re-applies visibility and time, so a hop through an invisible
    relation never happens; the LIMIT comes after. The walk stops after ``max_paths``
    paths (PostgreSQL evaluates a recursive query only as far as it is read, a level at a
    time), so a dense graph bounds the work; the nearest entities are found first."""
    p = Params(start, depth)
    tenant = p.add(v.tenant_id)
    rows = await conn.fetch(
        f"""WITH RECURSIVE walk (entity_id, depth, relation_id, path) AS (
                SELECT $1::uuid, 0, NULL::uuid, ARRAY[$1::uuid]
                UNION ALL
                SELECT nxt.id, w.depth + 1, r.relation_id, w.path || nxt.id
                FROM walk w
                JOIN graph_relations r ON r.tenant_id = {tenant}::uuid
                     AND (r.subject_id = w.entity_id OR r.object_id = w.entity_id),
                LATERAL (SELECT CASE WHEN r.subject_id = w.entity_id
                                     THEN r.object_id ELSE r.subject_id END AS id) nxt
                WHERE w.depth < $2 AND NOT nxt.id = ANY (w.path)
                  AND {relation_time(t, p, "r")} AND {asserting_memory_visible(v, p, "r")}),
            paths AS (SELECT * FROM walk LIMIT {p.add(max_paths)}),
            nearest AS (
                SELECT DISTINCT ON (entity_id) entity_id, depth, relation_id FROM paths
                WHERE depth > 0 ORDER BY entity_id, depth, relation_id)
            SELECT n.entity_id, n.depth, {_relation_columns(tenant)}
            FROM nearest n JOIN graph_relations r
                 ON r.tenant_id = {tenant}::uuid AND r.relation_id = n.relation_id
            ORDER BY n.depth, n.entity_id
            LIMIT {p.add(limit)}""",
        *p.values,
    )
    return list(rows)


async def graph_lane(
    conn: asyncpg.Connection,
    v: Visibility,
    names: Sequence[str],
    f: RowFilter,
    t: TimeCoords,
    limit: int,
    neighbour_weight: float,
) -> list[asyncpg.Record]:
    """Memories mentioning the entities named in a query (by name or alias) or their
    one-hop neighbours, best first, with a ``score``.

    Seeds, hops and memories are all filtered by the caller's visibility (and the search's
    status, time and filters) inside the statement, before its LIMIT: an entity mentioned
    mostly in other buckets cannot crowd out this caller's rows. A memory scores the sum,
    over the entities it mentions, of 1 (a named entity) or ``neighbour_weight`` (a
    neighbour) divided by ln(1 + the entity's visible mentions), so rare entities count
    more than ones mentioned everywhere."""
    p = Params(sorted(set(names)))
    tenant = p.add(v.tenant_id)
    rows = await conn.fetch(
        f"""WITH named AS (
                SELECT e.entity_id, true AS by_name FROM graph_entities e
                WHERE e.tenant_id = {tenant}::uuid AND e.name_norm = ANY ($1::text[])
                UNION
                SELECT a.entity_id, false FROM graph_mentions a
                WHERE a.tenant_id = {tenant}::uuid AND a.alias_norms && $1::text[]),
            seeds AS (
                SELECT DISTINCT n.entity_id FROM named n
                WHERE EXISTS (SELECT 1 FROM graph_mentions x
                              WHERE x.tenant_id = {tenant}::uuid AND x.entity_id = n.entity_id
                                AND (n.by_name OR x.alias_norms && $1::text[])
                                AND {mention_time(t, p, "x")}
                                AND {asserting_memory_visible(v, p, "x")})),
            reach AS (
                SELECT entity_id, 1.0::float8 AS weight FROM seeds
                UNION ALL
                SELECT CASE WHEN r.subject_id = s.entity_id THEN r.object_id
                            ELSE r.subject_id END, {p.add(neighbour_weight)}::float8
                FROM seeds s JOIN graph_relations r ON r.tenant_id = {tenant}::uuid
                     AND (r.subject_id = s.entity_id OR r.object_id = s.entity_id)
                WHERE {relation_time(t, p, "r")} AND {asserting_memory_visible(v, p, "r")}),
            ents AS (SELECT entity_id, max(weight) AS weight FROM reach GROUP BY entity_id),
            hits AS (
                SELECT m.tenant_id, m.memory_id, m.version, x.entity_id, en.weight
                FROM ents en
                JOIN graph_mentions x ON x.tenant_id = {tenant}::uuid
                     AND x.entity_id = en.entity_id AND {mention_time(t, p, "x")}
                JOIN memories m ON m.tenant_id = x.tenant_id AND m.memory_id = x.memory_id
                WHERE {visibility_predicate(v, p)} AND {time_predicate(t, p)}
                  AND {filter_predicate(f, p)}),
            df AS (SELECT entity_id, count(DISTINCT memory_id) AS n FROM hits GROUP BY entity_id),
            scored AS (
                SELECT h.tenant_id, h.memory_id, h.version,
                       sum(h.weight / ln(1 + df.n + 1)) AS score
                FROM hits h JOIN df USING (entity_id)
                GROUP BY h.tenant_id, h.memory_id, h.version
                ORDER BY score DESC, h.memory_id DESC
                LIMIT {p.add(limit)})
        SELECT {RANKING_COLUMNS}, s.score
        FROM scored s JOIN memories m USING (tenant_id, memory_id, version)
        ORDER BY s.score DESC, m.memory_id DESC""",
        *p.values,
    )
    return list(rows)
