"""The entity graph: what memories assert about entities and relations, and its reads.

Memories carry a ``GraphDraft`` (SaveMemory, UpdateMemory with ``graph`` in the mask,
ProposeMemory). It is validated with the rest of the request, before any transaction,
and written in the memory's own transaction:

- an entity is one per tenant and normalised name (NFKC, case-folded, whitespace
  collapsed); relation endpoints name entities of the same draft by name or alias, or
  mention a new one implicitly. Aliases resolve only within the draft: resolving them
  against other memories would tell a writer what invisible memories say;
- a single-valued (``CARDINALITY_ONE``) relation closes the valid time of the previous
  object's facts the writer can see and may change (the old fact stays in history);
- a proposal's assertions are pending until it is approved; a supersede retires the old
  memory's assertions; a forget erases them, and every entity left unasserted.

Reads (``GraphService``) answer only from memories the caller can see, and an entity no
visible memory asserts is NOT_FOUND exactly like a name never used.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import asyncpg

from brain.authz import Caller
from brain.v1 import graph_pb2

from . import convert
from . import validation as check
from .errors import InvalidArgument, NotFound
from .storage import graph as sql
from .storage.memories import TimeCoords
from .storage.visibility import Visibility

if TYPE_CHECKING:
    from .memories import Memories

MAX_ENTITIES = 64
MAX_RELATIONS = 64
MAX_ALIASES = 16
MAX_NAME_CHARS = 200
MAX_DEPTH = 3
DEFAULT_LIMIT = 50
# Query n-grams tried as entity names by the graph lane.
MAX_QUERY_WORDS = 4
MAX_QUERY_NAMES = 256
ENTITY_NOT_FOUND = "entity not found"
_PREDICATE = re.compile(r"^[a-z0-9][a-z0-9_:.\-]{0,63}$")
_WORD = re.compile(r"[\w][\w&.\-]*")
_POSSESSIVE = re.compile("['\u2019]s\\b")
CARDINALITY = {
    graph_pb2.CARDINALITY_UNSPECIFIED: "many",
    graph_pb2.CARDINALITY_MANY: "many",
    graph_pb2.CARDINALITY_ONE: "one",
}
CARDINALITY_TO_PROTO = {"many": graph_pb2.CARDINALITY_MANY, "one": graph_pb2.CARDINALITY_ONE}


def entity_not_found() -> NotFound:
    """The one NOT_FOUND for an entity: identical for unknown and invisible names."""
    return NotFound(ENTITY_NOT_FOUND)


@dataclass(frozen=True)
class Assertions:
    """A validated GraphDraft: the mentions and relations one memory asserts."""

    mentions: list[sql.NewMention] = field(default_factory=list)
    relations: list[sql.NewRelation] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.mentions)


NOTHING = Assertions()


def normalise_name(field_name: str, value: str) -> str:
    check.text(field_name, value, limit=MAX_NAME_CHARS)
    norm = check.normalise(value)
    if not norm:
        raise InvalidArgument(field_name, "must not be empty")
    return norm


def parse_draft(
    prefix: str, draft: graph_pb2.GraphDraft, valid_from: datetime, valid_to: datetime | None
) -> Assertions:
    """Validate a GraphDraft (every failure names its field); relations default to the
    memory's valid time."""
    if len(draft.entities) > MAX_ENTITIES:
        raise InvalidArgument(f"{prefix}.entities", f"at most {MAX_ENTITIES} entities")
    if len(draft.relations) > MAX_RELATIONS:
        raise InvalidArgument(f"{prefix}.relations", f"at most {MAX_RELATIONS} relations")
    mentions: dict[str, sql.NewMention] = {}
    names: dict[str, str] = {}  # any normalised name or alias -> the entity's name
    for i, e in enumerate(draft.entities):
        at = f"{prefix}.entities[{i}]"
        norm = normalise_name(f"{at}.name", e.name)
        if len(e.aliases) > MAX_ALIASES:
            raise InvalidArgument(f"{at}.aliases", f"at most {MAX_ALIASES} aliases")
        aliases = [a.strip() for a in e.aliases]
        alias_norms = [normalise_name(f"{at}.aliases", a) for a in e.aliases]
        for n in (norm, *alias_norms):
            if names.get(n, norm) != norm:
                raise InvalidArgument(at, f"'{n}' already names another entity of this draft")
            names[n] = norm
        kind = check.text(f"{at}.type", e.type, limit=64).strip()
        earlier = mentions.get(norm)
        if earlier is not None:  # the same entity twice: merge
            aliases = [*earlier.aliases, *aliases]
            alias_norms = [*earlier.alias_norms, *alias_norms]
            kind = kind or earlier.type
        alias_norms_set = sorted(set(alias_norms) - {norm})
        mentions[norm] = sql.NewMention(
            name_norm=norm,
            name=e.name.strip(),
            type=kind,
            aliases=tuple(sorted({a for a in aliases if check.normalise(a) != norm})),
            alias_norms=tuple(alias_norms_set),
        )
    relations = []
    for i, r in enumerate(draft.relations):
        at = f"{prefix}.relations[{i}]"
        ends = []
        for side, value in (("subject", r.subject), ("object", r.object)):
            norm = normalise_name(f"{at}.{side}", value)
            norm = names.get(norm, norm)
            if norm not in mentions:  # mentioned implicitly
                mentions[norm] = sql.NewMention(norm, value.strip(), "", (), ())
                names[norm] = norm
            ends.append(norm)
        if ends[0] == ends[1]:
            raise InvalidArgument(f"{at}.object", "must name another entity than the subject")
        predicate = check.text(f"{at}.predicate", r.predicate, limit=64)
        if not _PREDICATE.match(predicate):
            raise InvalidArgument(
                f"{at}.predicate",
                "must be 1-64 lower-case letters, digits and _ : . - (such as lives_in)",
            )
        if r.cardinality not in CARDINALITY:
            raise InvalidArgument(f"{at}.cardinality", f"unknown cardinality {r.cardinality}")
        starts = check.timestamp(r.valid_from, r.HasField("valid_from")) or valid_from
        ends_at = check.timestamp(r.valid_to, r.HasField("valid_to"))
        if not r.HasField("valid_from") and not r.HasField("valid_to"):
            ends_at = valid_to
        if ends_at is not None and ends_at < starts:
            raise InvalidArgument(f"{at}.valid_to", "must not be before valid_from")
        relations.append(
            sql.NewRelation(
                subject=ends[0],
                predicate=predicate,
                object=ends[1],
                cardinality=CARDINALITY[r.cardinality],
                valid_from=starts,
                valid_to=ends_at,
            )
        )
    return Assertions(mentions=list(mentions.values()), relations=relations)


# -- writes, inside the memory's transaction ------------------------------------------


async def assert_graph(
    conn: asyncpg.Connection,
    v: Visibility,
    tenant_id: Any,
    memory_id: uuid.UUID,
    assertions: Assertions,
    at: datetime,
    *,
    pending: bool,
) -> None:
    """Attach ``assertions`` to the memory; unless pending, close single-valued
    predecessors."""
    if not assertions:
        return
    ids = await sql.entity_ids(conn, [m.name_norm for m in assertions.mentions])
    await sql.insert_mentions(conn, tenant_id, memory_id, assertions.mentions, ids, at, pending)
    await sql.insert_relations(conn, tenant_id, memory_id, assertions.relations, ids, at, pending)
    if not pending:
        await sql.close_predecessors(conn, v, memory_id, at)


async def replace_graph(
    conn: asyncpg.Connection,
    v: Visibility,
    tenant_id: Any,
    memory_id: uuid.UUID,
    assertions: Assertions,
    at: datetime,
) -> None:
    """UpdateMemory of ``graph``: the old assertions retire, the new ones take over."""
    await sql.retire_memory(conn, tenant_id, memory_id, at)
    await assert_graph(conn, v, tenant_id, memory_id, assertions, at, pending=False)


async def approve(
    conn: asyncpg.Connection, v: Visibility, tenant_id: Any, memory_id: uuid.UUID, at: datetime
) -> None:
    """An approved proposal's assertions join the graph now."""
    await sql.activate_memory(conn, tenant_id, memory_id, at)
    await sql.close_predecessors(conn, v, memory_id, at)


retire = sql.retire_memory
erase = sql.erase_memory


# -- the graph lane ------------------------------------------------------------------


def query_names(query: str) -> list[str]:
    """Candidate entity names in a query: its word n-grams (up to four words), normalised
    like entity names, possessives dropped."""
    text = _POSSESSIVE.sub("", check.normalise(query))
    words = [w.strip(".-") for w in _WORD.findall(text) if w.strip(".-")]
    out: dict[str, None] = {}
    for n in range(1, MAX_QUERY_WORDS + 1):
        for i in range(len(words) - n + 1):
            out[" ".join(words[i : i + n])] = None
            if len(out) >= MAX_QUERY_NAMES:
                return list(out)
    return list(out)


# -- reads ---------------------------------------------------------------------------


def _ref(entity_id: uuid.UUID, name: str | None) -> graph_pb2.EntityRef:
    return graph_pb2.EntityRef(id=str(entity_id), name=name or "")


def relation_message(row: asyncpg.Record) -> graph_pb2.Relation:
    out = graph_pb2.Relation(
        id=str(row["relation_id"]),
        subject=_ref(row["subject_id"], row["subject_name"]),
        predicate=row["predicate"],
        object=_ref(row["object_id"], row["object_name"]),
        cardinality=CARDINALITY_TO_PROTO[row["cardinality"]],
        memory_id=str(row["memory_id"]),
    )
    for name in ("valid_from", "valid_to", "recorded_at", "retired_at"):
        stamp = convert.ts(row[name])
        if stamp is not None:
            getattr(out, name).CopyFrom(stamp)
    return out


def entity_message(row: asyncpg.Record) -> graph_pb2.Entity:
    return graph_pb2.Entity(
        id=str(row["entity_id"]),
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

    def time(self, t: Any) -> TimeCoords:
        from .memories import time_coords  # the memory domain's reading of TimeTravel

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
        return graph_pb2.LookupEntityResponse(
            entity=entity_message(entity), relations=[relation_message(r) for r in rows]
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
            rows = await sql.neighbours(conn, v, entity["entity_id"], depth, t, limit)
            found = await sql.summaries(conn, v, [r["entity_id"] for r in rows], t)
        return graph_pb2.ListNeighboursResponse(
            entity=entity_message(entity),
            neighbours=[
                graph_pb2.Neighbour(
                    entity=entity_message(found[r["entity_id"]]),
                    depth=r["depth"],
                    via=relation_message(r),
                )
                for r in rows
                if r["entity_id"] in found
            ],
        )
