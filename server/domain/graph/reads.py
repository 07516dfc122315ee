"""GraphService reads: every answer comes from memories the caller can see."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from typing import Any

import asyncpg

from brain.authz import Caller
from brain.server.domain import convert
from brain.server.domain.graph.assertions import (
    CARDINALITY_TO_PROTO,
    DEFAULT_LIMIT,
    MAX_DEPTH,
    MAX_WALK_PATHS,
    entity_not_found,
    normalise_name,
)
from brain.server.domain.memories import Memories, time_coords
from brain.server.errors import InvalidArgument
from brain.server.storage import graph as sql
from brain.server.storage.memories import TimeCoords
from brain.server.storage.visibility import Visibility
from brain.v1 import graph_pb2


class EntityIds:
    """The ids callers see: derived from (pepper, tenant, normalised name), never the
    storage id. The storage id of a name survives a forget exactly when some other memory,
    perhaps an invisible one, still asserts the name; a derived id is the same whatever the
    history, so it tells a caller nothing its visible memories do not."""

    def __init__(self, pepper: bytes) -> None:
        self._key = hmac.new(pepper, b"brain entity ids v1", hashlib.sha256).digest()

    def of(self, tenant_id: Any, name_norm: str) -> str:
        message = f"{tenant_id}\x1f{name_norm}".encode()
        digest = hmac.new(self._key, message, hashlib.sha256).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))

    def ref(self, tenant_id: Any, name_norm: str, name: str | None) -> graph_pb2.EntityRef:
        return graph_pb2.EntityRef(id=self.of(tenant_id, name_norm), name=name or "")

    def relation(self, tenant_id: Any, row: asyncpg.Record) -> graph_pb2.Relation:
        out = graph_pb2.Relation(
            id=str(row["relation_id"]),
            subject=self.ref(tenant_id, row["subject_norm"], row["subject_name"]),
            predicate=row["predicate"],
            object=self.ref(tenant_id, row["object_norm"], row["object_name"]),
            cardinality=CARDINALITY_TO_PROTO[row["cardinality"]],
            memory_id=str(row["memory_id"]),
        )
        for name in ("valid_from", "valid_to", "recorded_at", "retired_at"):
            stamp = convert.ts(row[name])
            if stamp is not None:
                getattr(out, name).CopyFrom(stamp)
        return out

    def entity(self, tenant_id: Any, row: asyncpg.Record) -> graph_pb2.Entity:
        return graph_pb2.Entity(
            id=self.of(tenant_id, row["name_norm"]),
            name=row["name"],
            types=sorted(row["types"]),
            aliases=list(row["aliases"]),
            mention_count=row["mention_count"],
            degree=row["degree"],
        )


class Graph:
    """Carries out GraphService RPCs for an authenticated caller."""

    def __init__(self, memories: Memories) -> None:
        self.memories = memories
        self.ids = EntityIds(memories.pepper)

    def time(self, t: Any) -> TimeCoords:
        return time_coords(t, default_any_valid=False)

    async def _start(
        self, conn: asyncpg.Connection, v: Visibility, name: str, t: TimeCoords
    ) -> asyncpg.Record:
        entity_id = await sql.find_entity(conn, v, name, t)
        if entity_id is None:
            raise entity_not_found()
        found = await sql.summaries(conn, v, [entity_id], t)
        if entity_id not in found:  # cannot happen: the mention that found it is visible
            raise entity_not_found()
        return found[entity_id]

    async def lookup(
        self,
        caller: Caller,
        req: graph_pb2.LookupEntityRequest,
        timeout_ms: int | None = None,
    ) -> graph_pb2.LookupEntityResponse:
        m = self.memories
        name = normalise_name("name", req.name)
        t = self.time(req.time)
        limit = m.page_size("relation_limit", req.relation_limit, DEFAULT_LIMIT)
        v = m.visibility(caller)
        async with m.tx(caller, timeout_ms=timeout_ms, readonly=True, replica=True) as conn:
            entity = await self._start(conn, v, name, t)
            rows = await sql.relations_of(conn, v, entity["entity_id"], t, limit)
        ids, tenant = self.ids, caller.tenant_id
        return graph_pb2.LookupEntityResponse(
            entity=ids.entity(tenant, entity), relations=[ids.relation(tenant, r) for r in rows]
        )

    async def neighbours(
        self,
        caller: Caller,
        req: graph_pb2.ListNeighboursRequest,
        timeout_ms: int | None = None,
    ) -> graph_pb2.ListNeighboursResponse:
        m = self.memories
        name = normalise_name("name", req.name)
        depth = req.depth or 1
        if not 1 <= depth <= MAX_DEPTH:
            raise InvalidArgument("depth", f"must be between 1 and {MAX_DEPTH}")
        t = self.time(req.time)
        limit = m.page_size("limit", req.limit, DEFAULT_LIMIT)
        v = m.visibility(caller)
        async with m.tx(caller, timeout_ms=timeout_ms, readonly=True, replica=True) as conn:
            entity = await self._start(conn, v, name, t)
            rows = await sql.neighbours(
                conn, v, entity["entity_id"], depth, t, limit, MAX_WALK_PATHS
            )
            found = await sql.summaries(conn, v, [r["entity_id"] for r in rows], t)
        ids, tenant = self.ids, caller.tenant_id
        return graph_pb2.ListNeighboursResponse(
            entity=ids.entity(tenant, entity),
            neighbours=[
                graph_pb2.Neighbour(
                    entity=ids.entity(tenant, found[r["entity_id"]]),
                    depth=r["depth"],
                    via=ids.relation(tenant, r),
                )
                for r in rows
                if r["entity_id"] in found
            ],
        )
