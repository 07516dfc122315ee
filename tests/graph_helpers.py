"""Helpers for the entity graph tests (issue 19)."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from datetime import datetime
from typing import Any

from google.protobuf.field_mask_pb2 import FieldMask

from brain.v1 import common_pb2, graph_pb2, graph_pb2_grpc, memory_pb2, review_pb2

from .helpers import Api, ts

Rel = tuple[str, str, str]  # subject, predicate, object


def draft(
    entities: Sequence[str | tuple[str, str, Sequence[str]]] = (),
    relations: Sequence[Rel | graph_pb2.RelationDraft] = (),
    *,
    one: Sequence[str] = (),
    valid_from: datetime | None = None,
) -> graph_pb2.GraphDraft:
    """Entities as names or (name, type, aliases); relations as triples (predicates in
    ``one`` single-valued) or messages."""
    out = graph_pb2.GraphDraft()
    for e in entities:
        if isinstance(e, str):
            out.entities.add(name=e)
        else:
            out.entities.add(name=e[0], type=e[1], aliases=list(e[2]))
    for r in relations:
        if isinstance(r, graph_pb2.RelationDraft):
            out.relations.append(r)
            continue
        rel = out.relations.add(
            subject=r[0],
            predicate=r[1],
            object=r[2],
            cardinality=graph_pb2.CARDINALITY_ONE if r[1] in one else graph_pb2.CARDINALITY_MANY,
        )
        if valid_from is not None:
            rel.valid_from.CopyFrom(ts(valid_from))
    return out


def graph_stub(api: Api) -> graph_pb2_grpc.GraphServiceStub:
    return graph_pb2_grpc.GraphServiceStub(api.channel)


async def save(
    api: Api, content: str, graph: graph_pb2.GraphDraft, **kw: Any
) -> memory_pb2.SaveMemoryResponse:
    supersedes = kw.pop("supersedes", ())
    return await api.memories.SaveMemory(
        memory_pb2.SaveMemoryRequest(
            scope=api.scope(),
            memory=common_pb2.MemoryDraft(content=content, **kw),
            supersedes=list(supersedes),
            graph=graph,
        ),
        metadata=api.md,
    )


async def update_graph(api: Api, memory_id: str, graph: graph_pb2.GraphDraft) -> common_pb2.Memory:
    response = await api.memories.UpdateMemory(
        memory_pb2.UpdateMemoryRequest(
            scope=api.scope(), id=memory_id, graph=graph, update_mask=FieldMask(paths=["graph"])
        ),
        metadata=api.md,
    )
    return response.memory


async def propose(api: Api, content: str, graph: graph_pb2.GraphDraft) -> common_pb2.Memory:
    response = await api.review.ProposeMemory(
        review_pb2.ProposeMemoryRequest(
            scope=api.scope(),
            memory=common_pb2.MemoryDraft(content=content),
            reason="the user said so",
            graph=graph,
        ),
        metadata=api.md,
    )
    return response.candidate


def lookup_call(api: Api, name: str, **time: Any) -> Awaitable[graph_pb2.LookupEntityResponse]:
    return graph_stub(api).LookupEntity(
        graph_pb2.LookupEntityRequest(
            scope=api.scope(), name=name, time=common_pb2.TimeTravel(**time)
        ),
        metadata=api.md,
    )


def neighbours_call(
    api: Api, name: str, depth: int = 1, **time: Any
) -> Awaitable[graph_pb2.ListNeighboursResponse]:
    return graph_stub(api).ListNeighbours(
        graph_pb2.ListNeighboursRequest(
            scope=api.scope(), name=name, depth=depth, time=common_pb2.TimeTravel(**time)
        ),
        metadata=api.md,
    )


def facts(response: graph_pb2.LookupEntityResponse) -> set[Rel]:
    """The relations of a lookup as (subject, predicate, object) names, lower-cased."""
    return {
        (r.subject.name.lower(), r.predicate, r.object.name.lower()) for r in response.relations
    }


def names(response: graph_pb2.ListNeighboursResponse) -> dict[str, int]:
    return {n.entity.name.lower(): n.depth for n in response.neighbours}
