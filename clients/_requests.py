"""Request messages for every RPC, built once for the sync and the asyncio client.

Each builder stamps the client's scope on the request's `scope` field (field 1).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Literal, TypeAlias, TypedDict

from google.protobuf.duration_pb2 import Duration
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.timestamp_pb2 import Timestamp

from brain.v1 import (
    audit_pb2,
    common_pb2,
    graph_pb2,
    identity_pb2,
    knowledge_pb2,
    memory_pb2,
    review_pb2,
)

Scope = common_pb2.Scope


TimestampLike = datetime | Timestamp


class DraftFields(TypedDict, total=False):
    """Optional memory fields accepted by `save`, `propose` and `update` (see `MemoryDraft`)."""

    kind: str
    tags: Sequence[str]
    metadata: Mapping[str, str]
    labels: Sequence[str]
    confidence: float
    importance: float
    valid_from: TimestampLike
    valid_to: TimestampLike
    expires_at: TimestampLike


MEMORY_FIELDS = DraftFields.__optional_keys__ | DraftFields.__required_keys__

Decision: TypeAlias = Literal["approve", "reject"] | review_pb2.ReviewDecision.ValueType


_DECISIONS = {
    "approve": review_pb2.REVIEW_DECISION_APPROVE,
    "reject": review_pb2.REVIEW_DECISION_REJECT,
}


def strings(value: Iterable[str], name: str) -> list[str]:
    """The strings of a list parameter as a list; a plain str is refused, not split.

    A str is an iterable of its characters, so ``tags="abc"`` would silently become the tags
    a, b and c; every list-of-strings parameter of both clients passes through here.
    """
    if isinstance(value, str | bytes):
        raise TypeError(
            f"{name} must be a list of strings, not a {type(value).__name__}: "
            f"pass [{value!r}] for a single one"
        )
    out = list(value)
    for i, item in enumerate(out):
        if not isinstance(item, str):
            raise TypeError(f"{name}[{i}] must be a str, not {type(item).__name__}")
    return out


def timestamp(value: TimestampLike) -> Timestamp:
    if isinstance(value, Timestamp):
        return value
    if value.tzinfo is None:
        raise ValueError(f"timestamp {value.isoformat()} has no timezone; pass an aware datetime")
    ts = Timestamp()
    ts.FromDatetime(value)
    return ts


def time_travel(
    *,
    as_of: TimestampLike | None = None,
    valid_at: TimestampLike | None = None,
    any_valid_time: bool = False,
) -> common_pb2.TimeTravel:
    """Build the bitemporal read coordinates for `get`, `search`, `list` and `build_context`."""
    t = common_pb2.TimeTravel(any_valid_time=any_valid_time)
    if as_of is not None:
        t.as_of.CopyFrom(timestamp(as_of))
    if valid_at is not None:
        t.valid_at.CopyFrom(timestamp(valid_at))
    return t


EntityLike: TypeAlias = "str | tuple[str, str] | tuple[str, str, Sequence[str]]"


def graph_draft(
    entities: Iterable[EntityLike] = (),
    relations: Iterable[tuple[str, str, str]] = (),
    *,
    single_valued: Iterable[str] = (),
) -> graph_pb2.GraphDraft:
    """What a memory asserts about the entity graph, for `save`, `update` and `propose`.

    Entities are names, (name, type) or (name, type, aliases); relations are (subject,
    predicate, object) by entity name or alias. Predicates in ``single_valued`` hold one
    object at a time: a new object closes the previous one's valid time."""
    one = set(strings(single_valued, "single_valued"))
    if isinstance(entities, str | bytes):
        raise TypeError(f"entities must be a list, not a str: pass [{entities!r}] for one")
    out = graph_pb2.GraphDraft()
    for n, e in enumerate(entities):
        if isinstance(e, str):
            out.entities.add(name=e)
        else:
            aliases = strings(e[2], f"entities[{n}] aliases") if len(e) > 2 else []
            out.entities.add(name=e[0], type=e[1], aliases=aliases)
    for n, relation in enumerate(relations):
        if isinstance(relation, str):  # "ann" would unpack as ("a", "n", "n")
            raise TypeError(f"relations[{n}] must be a (subject, predicate, object) tuple")
        subject, predicate, obj = relation
        single = predicate in one
        out.relations.add(
            subject=subject,
            predicate=predicate,
            object=obj,
            cardinality=graph_pb2.CARDINALITY_ONE if single else graph_pb2.CARDINALITY_MANY,
        )
    return out


def draft(content: str | None, fields: DraftFields) -> common_pb2.MemoryDraft:
    """The memory fields of a save, proposal or update. An unknown keyword is a TypeError,
    as for any Python call: ``lables=["hr"]`` must not store a memory with the default
    labels, nor ``scope=`` save outside the client's scope."""
    unknown = sorted(set(fields) - MEMORY_FIELDS)
    if unknown:
        raise TypeError(
            f"unexpected keyword argument(s) {', '.join(unknown)}; a memory's fields are "
            f"{', '.join(sorted(MEMORY_FIELDS))} (the scope is the client's: make another "
            "client for another scope)"
        )
    d = common_pb2.MemoryDraft(
        content=content or "",
        kind=fields.get("kind", ""),
        tags=strings(fields.get("tags", ()), "tags"),
        metadata=dict(fields.get("metadata", {})),
        labels=strings(fields.get("labels", ()), "labels"),
    )
    if "confidence" in fields:
        d.confidence = fields["confidence"]
    if "importance" in fields:
        d.importance = fields["importance"]
    if "valid_from" in fields:
        d.valid_from.CopyFrom(timestamp(fields["valid_from"]))
    if "valid_to" in fields:
        d.valid_to.CopyFrom(timestamp(fields["valid_to"]))
    if "expires_at" in fields:
        d.expires_at.CopyFrom(timestamp(fields["expires_at"]))
    return d


def duration(value: timedelta) -> Duration:
    d = Duration()
    d.FromTimedelta(value)
    return d


def fresh_idempotency_key(given: str | None) -> str:
    """The caller's key, or a fresh one for this logical call ("" sends none)."""
    return f"client-{uuid.uuid4()}" if given is None else given


class Requests:
    """Builds every request message with the client's scope stamped on field 1."""

    def __init__(self, scope: common_pb2.Scope) -> None:
        self.scope = scope

    def save(
        self,
        content: str,
        supersedes: Iterable[str],
        idempotency_key: str,
        fields: DraftFields,
        graph: graph_pb2.GraphDraft | None = None,
    ) -> memory_pb2.SaveMemoryRequest:
        return memory_pb2.SaveMemoryRequest(
            scope=self.scope,
            memory=draft(content, fields),
            supersedes=strings(supersedes, "supersedes"),
            idempotency_key=idempotency_key,
            graph=graph,
        )

    def update(
        self,
        id: str,
        expected_version: int,
        idempotency_key: str,
        fields: DraftFields,
        content: str | None,
        graph: graph_pb2.GraphDraft | None = None,
    ) -> memory_pb2.UpdateMemoryRequest:
        paths = sorted(fields) + (["content"] if content is not None else [])
        paths += ["graph"] if graph is not None else []
        if not paths:
            raise ValueError("update needs at least one field to change")
        return memory_pb2.UpdateMemoryRequest(
            scope=self.scope,
            id=id,
            patch=draft(content, fields),
            update_mask=FieldMask(paths=paths),
            expected_version=expected_version,
            idempotency_key=idempotency_key,
            graph=graph,
        )

    def propose(
        self,
        content: str,
        reason: str,
        supersedes: Iterable[str],
        review_within: timedelta | None,
        idempotency_key: str,
        fields: DraftFields,
        graph: graph_pb2.GraphDraft | None = None,
    ) -> review_pb2.ProposeMemoryRequest:
        request = review_pb2.ProposeMemoryRequest(
            scope=self.scope,
            memory=draft(content, fields),
            supersedes=strings(supersedes, "supersedes"),
            reason=reason,
            idempotency_key=idempotency_key,
            graph=graph,
        )
        if review_within is not None:
            request.review_within.CopyFrom(duration(review_within))
        return request

    def review(
        self, id: str, decision: Decision, reason: str, readmit_tombstoned: bool
    ) -> review_pb2.ReviewCandidateRequest:
        value = _DECISIONS[decision] if isinstance(decision, str) else decision
        return review_pb2.ReviewCandidateRequest(
            scope=self.scope,
            id=id,
            decision=value,
            reason=reason,
            readmit_tombstoned=readmit_tombstoned,
        )

    def list_conflicts(
        self, memory_id: str, states: Iterable[common_pb2.ConflictState.ValueType], page_size: int
    ) -> review_pb2.ListConflictsRequest:
        return review_pb2.ListConflictsRequest(
            scope=self.scope, memory_id=memory_id, states=list(states), page_size=page_size
        )

    def resolve_conflict(
        self, id: str, decision: Decision, reason: str
    ) -> review_pb2.ResolveConflictRequest:
        value = _DECISIONS[decision] if isinstance(decision, str) else decision
        return review_pb2.ResolveConflictRequest(
            scope=self.scope, id=id, decision=value, reason=reason
        )

    def consolidate(
        self, min_overlap: float | None, max_clusters: int, dry_run: bool, reason: str
    ) -> review_pb2.ConsolidateMemoriesRequest:
        request = review_pb2.ConsolidateMemoriesRequest(
            scope=self.scope, max_clusters=max_clusters, dry_run=dry_run, reason=reason
        )
        if min_overlap is not None:
            request.min_overlap = min_overlap
        return request

    def audit(
        self, memory_id: str, principal: str, since: TimestampLike | None, page_size: int
    ) -> audit_pb2.ListAuditEventsRequest:
        request = audit_pb2.ListAuditEventsRequest(
            scope=self.scope, memory_id=memory_id, principal=principal, page_size=page_size
        )
        if since is not None:
            request.since.CopyFrom(timestamp(since))
        return request

    def get(self, id: str, time: common_pb2.TimeTravel | None) -> memory_pb2.GetMemoryRequest:
        return memory_pb2.GetMemoryRequest(scope=self.scope, id=id, time=time)

    def forget(self, id: str, reason: str) -> memory_pb2.ForgetMemoryRequest:
        return memory_pb2.ForgetMemoryRequest(scope=self.scope, id=id, reason=reason)

    def search(
        self,
        query: str,
        limit: int,
        filter: common_pb2.MemoryFilter | None,
        time: common_pb2.TimeTravel | None,
        mode: memory_pb2.SearchMode.ValueType,
        query_embedding: Sequence[float],
        min_relevance: float | None = None,
    ) -> memory_pb2.SearchMemoriesRequest:
        return memory_pb2.SearchMemoriesRequest(
            scope=self.scope,
            query=query,
            limit=limit,
            filter=filter,
            time=time,
            mode=mode,
            query_embedding=list(query_embedding),
            min_relevance=min_relevance,
        )

    def list(
        self,
        filter: common_pb2.MemoryFilter | None,
        time: common_pb2.TimeTravel | None,
        page_size: int,
    ) -> memory_pb2.ListMemoriesRequest:
        return memory_pb2.ListMemoriesRequest(
            scope=self.scope, filter=filter, time=time, page_size=page_size
        )

    def list_page(
        self,
        filter: common_pb2.MemoryFilter | None,
        time: common_pb2.TimeTravel | None,
        page_size: int,
        page_token: str,
    ) -> memory_pb2.ListMemoriesRequest:
        return memory_pb2.ListMemoriesRequest(
            scope=self.scope, filter=filter, time=time, page_size=page_size, page_token=page_token
        )

    def history(self, id: str) -> memory_pb2.GetMemoryHistoryRequest:
        return memory_pb2.GetMemoryHistoryRequest(scope=self.scope, id=id)

    def export(
        self, filter: common_pb2.MemoryFilter | None, cursor: str, include_history: bool
    ) -> memory_pb2.ExportMemoriesRequest:
        return memory_pb2.ExportMemoriesRequest(
            scope=self.scope, filter=filter, cursor=cursor, include_history=include_history
        )

    def watch(
        self,
        filter: common_pb2.MemoryFilter | None,
        cursor: str,
        include_documents: bool = False,
        document_collections: Iterable[str] = (),
    ) -> memory_pb2.WatchMemoriesRequest:
        return memory_pb2.WatchMemoriesRequest(
            scope=self.scope, filter=filter, cursor=cursor, include_documents=include_documents,
            document_collections=strings(document_collections, "document_collections"),
        )  # fmt: skip

    def build_context(
        self,
        query: str,
        token_budget: int,
        max_memories: int,
        filter: common_pb2.MemoryFilter | None,
        time: common_pb2.TimeTravel | None,
        knowledge_collections: Iterable[str] = (),
        exclude_knowledge: bool = False,
    ) -> memory_pb2.BuildContextRequest:
        return memory_pb2.BuildContextRequest(
            scope=self.scope,
            query=query,
            token_budget=token_budget,
            max_memories=max_memories,
            filter=filter,
            time=time,
            knowledge_collections=strings(knowledge_collections, "knowledge_collections"),
            exclude_knowledge=exclude_knowledge,
        )

    def list_candidates(self, proposed_by: str, page_size: int) -> review_pb2.ListCandidatesRequest:
        return review_pb2.ListCandidatesRequest(
            scope=self.scope, proposed_by=proposed_by, page_size=page_size
        )

    def withdraw(self, id: str, reason: str) -> review_pb2.WithdrawCandidateRequest:
        return review_pb2.WithdrawCandidateRequest(scope=self.scope, id=id, reason=reason)

    def whoami(self) -> identity_pb2.WhoAmIRequest:
        return identity_pb2.WhoAmIRequest(scope=self.scope)

    def lookup_entity(
        self, name: str, time: common_pb2.TimeTravel | None, relation_limit: int
    ) -> graph_pb2.LookupEntityRequest:
        return graph_pb2.LookupEntityRequest(
            scope=self.scope, name=name, time=time, relation_limit=relation_limit
        )

    def neighbours(
        self, name: str, depth: int, time: common_pb2.TimeTravel | None, limit: int
    ) -> graph_pb2.ListNeighboursRequest:
        return graph_pb2.ListNeighboursRequest(
            scope=self.scope, name=name, depth=depth, time=time, limit=limit
        )

    # -- KnowledgeService ------------------------------------------------------------------

    def put_documents(
        self, collection: str, documents: Iterable[knowledge_pb2.PutDocumentsItem]
    ) -> knowledge_pb2.PutDocumentsRequest:
        items = list(documents)
        for i, item in enumerate(items):
            if not isinstance(item, knowledge_pb2.PutDocumentsItem):
                raise TypeError(
                    f"documents[{i}] must be a brain.v1.knowledge_pb2.PutDocumentsItem, "
                    f"not {type(item).__name__}"
                )
        return knowledge_pb2.PutDocumentsRequest(
            scope=self.scope, collection=collection, documents=items
        )

    def put_document(
        self,
        collection: str,
        path: str,
        content: str,
        format: knowledge_pb2.DocumentFormat.ValueType,
        labels: Iterable[str],
    ) -> knowledge_pb2.PutDocumentRequest:
        return knowledge_pb2.PutDocumentRequest(
            scope=self.scope,
            collection=collection,
            path=path,
            content=content,
            format=format,
            labels=strings(labels, "labels"),
        )

    def get_document(
        self, id: str, version: int, include_content: bool
    ) -> knowledge_pb2.GetDocumentRequest:
        return knowledge_pb2.GetDocumentRequest(
            scope=self.scope, id=id, version=version, include_content=include_content
        )

    def list_documents(self, collection: str, page_size: int) -> knowledge_pb2.ListDocumentsRequest:
        return knowledge_pb2.ListDocumentsRequest(
            scope=self.scope, collection=collection, page_size=page_size
        )

    def delete_document(self, id: str) -> knowledge_pb2.DeleteDocumentRequest:
        return knowledge_pb2.DeleteDocumentRequest(scope=self.scope, id=id)

    def search_knowledge(
        self,
        query: str,
        limit: int,
        collections: Iterable[str],
        lexical_only: bool,
        min_relevance: float | None = None,
    ) -> knowledge_pb2.SearchKnowledgeRequest:
        return knowledge_pb2.SearchKnowledgeRequest(
            scope=self.scope,
            query=query,
            limit=limit,
            collections=strings(collections, "collections"),
            lexical_only=lexical_only,
            min_relevance=min_relevance,
        )
