"""What the memory write and read paths share: defaults, request parsing, the base class."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

import asyncpg
import structlog
from google.protobuf.message import Message

from brain.authz import Caller
from brain.server.domain import cursors
from brain.server.domain import validation as check
from brain.server.domain.conflicts.judge import Judge
from brain.server.domain.context import Neighbours
from brain.server.domain.convert import PROTO_TO_STATUS
from brain.server.domain.graph.assertions import Assertions
from brain.server.domain.graph.extraction import Extractor
from brain.server.domain.retrieval.embedders import Embedder, EmbedderError, NoEmbedder
from brain.server.domain.retrieval.lanes import FusedHit, RetrievalParams
from brain.server.domain.retrieval.query_vectors import QueryVectors
from brain.server.domain.retrieval.rerankers import Reranker
from brain.server.errors import (
    InvalidArgument,
)
from brain.server.storage import memories as sql
from brain.server.storage.db import Database
from brain.server.storage.visibility import Visibility
from brain.v1 import common_pb2, memory_pb2
from brain.v1.graph_pb2 import GraphDraft

DEFAULT_LABEL = "team"
DEFAULT_KIND = "note"
DEFAULT_SEARCH_LIMIT = 10
DEFAULT_PAGE_SIZE = 50
EXPORT_BATCH = 200
MAX_SUPERSEDES = 100
MAX_KNOWLEDGE_COLLECTIONS = 16
ALL_STATUSES = tuple(PROTO_TO_STATUS.values())
# Not a patch field: the request's `graph` replaces what the memory asserts (issue 19).
GRAPH_PATH = "graph"
UPDATABLE_FIELDS = frozenset(
    {"content", "kind", "tags", "metadata", "labels", "confidence", "importance",
     "valid_from", "valid_to", "expires_at"}
)  # fmt: skip

_log = structlog.get_logger("brain.memories")


@dataclass(frozen=True)
class Limits:
    max_page_size: int = 100
    statement_timeout_ms: int = 10_000
    # How long an idempotency key replays its first response.
    idempotency_retention: timedelta = timedelta(hours=24)
    # Off only in tests proving that row-level security holds on its own.
    app_filter: bool = True
    # The database is a Citus coordinator: statements name the tenant even with
    # app_filter off (storage.visibility.Visibility.tenant_pin), and a put's chunks go in
    # row by row (storage.knowledge.insert_version).
    distributed: bool = False


Hit = FusedHit


@dataclass(frozen=True)
class Recalled:
    """A search's hits, best first, and how they were ordered (a `memory_pb2.Ranking`).

    ``below_floor``: matches withheld because none reached the relevance floor (at most
    the search's limit), so no hits and ``below_floor > 0`` means "nothing relevant".
    """

    hits: list[FusedHit]
    ranking: int
    below_floor: int = 0
    # Open conflicts of the hits with memories the caller sees, by memory id (issue 30).
    conflicts: dict[Any, list[common_pb2.Conflict]] = field(default_factory=dict)


# Sees every fused candidate of a search before the floor and the limit, with the number
# of rows searched: how brain-eval fits the relevance model on what the server computed.
CandidateObserver = Callable[[list[FusedHit], int], None]


def fingerprint(pepper: bytes, content: str) -> bytes:
    """Keyed hash of the normalised value, for dedupe and tombstones."""
    normalised = check.normalise(content).encode()
    return hmac.new(pepper, b"fingerprint:" + normalised, hashlib.sha256).digest()


def time_coords(t: common_pb2.TimeTravel, *, default_any_valid: bool) -> sql.TimeCoords:
    as_of = check.timestamp(t.as_of, t.HasField("as_of"))
    valid_at = check.timestamp(t.valid_at, t.HasField("valid_at"))
    any_valid = t.any_valid_time or (default_any_valid and valid_at is None)
    return sql.TimeCoords(as_of=as_of, valid_at=valid_at, any_valid_time=any_valid)


def row_filter(
    f: common_pb2.MemoryFilter, default_statuses: Sequence[str] = ("active",)
) -> sql.RowFilter:
    statuses: list[str] = []
    for s in f.statuses:
        if s not in PROTO_TO_STATUS:
            raise InvalidArgument("filter.statuses", f"unknown status {s}")
        statuses.append(PROTO_TO_STATUS[s])
    return sql.RowFilter(
        statuses=statuses or list(default_statuses),
        kinds=[
            check.text("filter.kinds", k, limit=64) for k in check.capped("filter.kinds", f.kinds)
        ],
        tags=[check.text("filter.tags", t, limit=64) for t in check.capped("filter.tags", f.tags)],
        labels=check.names("filter.labels", f.labels, limit=check.MAX_LABELS),
        namespaces=check.names("filter.namespaces", f.namespaces, limit=16),
        user_id=check.name("filter.user_id", f.user_id),
        session_id=check.name("filter.session_id", f.session_id),
        created_by=check.text("filter.created_by", f.created_by),
        min_importance=(
            check.unit_interval("filter.min_importance", f.min_importance)
            if f.HasField("min_importance")
            else None
        ),
    )


def request_hash(pepper: bytes, method: str, request: Message) -> bytes:
    """What an idempotency key is bound to: the method and the exact request body, as a
    keyed hash (like fingerprints), so the record is no confirmable copy of the content."""
    body = request.SerializeToString(deterministic=True)
    return hmac.new(pepper, b"request:" + method.encode() + b"\0" + body, hashlib.sha256).digest()


class ReviewGate(Protocol):
    """What the write path needs from review (`brain.server.domain.review.Review` provides it);
    a protocol, so memories never import review."""

    async def review_required(
        self, conn: asyncpg.Connection, caller: Caller, namespace: str
    ) -> bool: ...

    async def save_as_candidate(
        self,
        conn: asyncpg.Connection,
        caller: Caller,
        new: sql.NewMemory,
        supersedes: list[uuid.UUID],
        assertions: Assertions = ...,
    ) -> memory_pb2.SaveMemoryResponse: ...

    async def propose_extracted(
        self, caller: Caller, memory_id: uuid.UUID, content: str, draft: GraphDraft, model: str
    ) -> None: ...


class KnowledgeRecall(Protocol):
    """What BuildContext needs from the knowledge base (`brain.server.domain.knowledge.
    Knowledge` provides it); a protocol, so memories never import knowledge."""

    async def recall_chunks(
        self,
        caller: Caller,
        query_text: str,
        limit: int,
        collections: Sequence[str],
        timeout_ms: int | None,
        vector: Sequence[float] | None,
        lexical_only: bool,
        min_relevance: float | None = None,
    ) -> list[FusedHit]: ...

    async def neighbours(
        self, caller: Caller, hits: Sequence[FusedHit], timeout_ms: int | None
    ) -> Neighbours: ...


class MemoryBase:
    """State and plumbing shared by `MemoryWrites` and `MemoryReads`."""

    def __init__(
        self,
        db: Database,
        pepper: bytes,
        limits: Limits | None = None,
        embedder: Embedder | None = None,
        retrieval_params: RetrievalParams | None = None,
        embedding_dimension: int = 384,
        reranker: Reranker | None = None,
    ) -> None:
        self.db = db
        self.pepper = pepper
        self.tokens = cursors.Tokens(pepper)
        self.limits = limits or Limits()
        self.embedder: Embedder = embedder or NoEmbedder()
        self.params = retrieval_params or RetrievalParams()
        self.reranker = reranker
        # The dimension of the schema's vector column (checked against the embedder at start).
        self.embedding_dimension = embedding_dimension
        # Set by Review: saves into review-required namespaces become candidates.
        self.review: ReviewGate | None = None
        # Optional graph extraction (issue 19), run after a save commits.
        self.extractor: Extractor | None = None
        # Optional model judge of the conflicts a write found (issue 30), after it commits.
        self.judge: Judge | None = None
        self.background: set[asyncio.Task[None]] = set()
        self.observer: CandidateObserver | None = None  # brain-eval only
        self.query_vectors = QueryVectors()
        # Set by Knowledge: BuildContext mixes in document chunks.
        self.knowledge: KnowledgeRecall | None = None

    def tx(
        self,
        caller: Caller,
        *,
        timeout_ms: int | None = None,
        readonly: bool = False,
        replica: bool = False,
    ) -> AbstractAsyncContextManager[asyncpg.Connection]:
        """A caller transaction; ``replica`` reads may go to the read replica, if any."""
        return self.db.caller_tx(
            caller,
            timeout_ms=timeout_ms,
            cap_ms=self.limits.statement_timeout_ms,
            readonly=readonly,
            replica=replica,
        )

    def visibility(self, caller: Caller) -> Visibility:
        return Visibility.of(
            caller, app_filter=self.limits.app_filter, tenant_pin=self.limits.distributed
        )

    def page_size(self, field: str, requested: int, default: int) -> int:
        size = requested or default
        if not 0 < size <= self.limits.max_page_size:
            raise InvalidArgument(field, f"must be between 1 and {self.limits.max_page_size}")
        return size

    @property
    def embedding_model(self) -> str | None:
        """What stored vectors were made by; vectors of another model are not compared."""
        return model_id(self.embedder)

    async def embed_content(self, content: str) -> tuple[list[float] | None, str | None]:
        """A vector for stored content, or (None, None): a failing embedder never fails a write."""
        if self.embedder.dimension == 0:
            return None, None
        try:
            return (await self.embedder.embed([content]))[0], model_id(self.embedder)
        except EmbedderError as exc:
            _log.warning("embedding failed; stored without a vector", error=str(exc))
            return None, None


def model_id(embedder: Embedder) -> str | None:
    """``local:all-MiniLM-L6-v2``, ``openai:<model>``; None for the lexical-only embedder."""
    if embedder.dimension == 0:
        return None
    model = getattr(embedder, "model", None) or getattr(embedder, "model_name", None)
    return f"{embedder.name}:{model}" if model else embedder.name
