"""The memory domain: defaults, validation and the transactions behind each RPC."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from brain.authz import Caller
from brain.v1 import common_pb2, memory_pb2

from . import validation as check
from .convert import PROTO_TO_STATUS
from .errors import InvalidArgument, PermissionDenied, memory_not_found
from .storage import memories as sql
from .storage.db import Database
from .storage.visibility import Visibility

DEFAULT_LABEL = "team"
DEFAULT_KIND = "note"
DEFAULT_SEARCH_LIMIT = 10


@dataclass(frozen=True)
class Limits:
    max_page_size: int = 100
    statement_timeout_ms: int = 10_000


@dataclass(frozen=True)
class Hit:
    row: asyncpg.Record
    score: float
    lexical_rank: int
    semantic_rank: int
    lexical_score: float
    semantic_similarity: float


def fingerprint(pepper: bytes, content: str) -> bytes:
    """Keyed hash of the normalised value, for dedupe and tombstones."""
    return hmac.new(
        pepper, b"fingerprint:" + check.normalise(content).encode(), hashlib.sha256
    ).digest()


def time_coords(t: common_pb2.TimeTravel, *, default_any_valid: bool) -> sql.TimeCoords:
    as_of = check.timestamp(t.as_of, t.HasField("as_of"))
    valid_at = check.timestamp(t.valid_at, t.HasField("valid_at"))
    any_valid = t.any_valid_time or (default_any_valid and valid_at is None)
    return sql.TimeCoords(as_of=as_of, valid_at=valid_at, any_valid_time=any_valid)


def row_filter(f: common_pb2.MemoryFilter) -> sql.RowFilter:
    statuses: list[str] = []
    for s in f.statuses:
        if s not in PROTO_TO_STATUS:
            raise InvalidArgument("filter.statuses", f"unknown status {s}")
        statuses.append(PROTO_TO_STATUS[s])
    return sql.RowFilter(
        statuses=statuses or ["active"],
        kinds=[check.text("filter.kinds", k, limit=64) for k in f.kinds],
        tags=[check.text("filter.tags", t, limit=64) for t in f.tags],
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


class Memories:
    """Carries out memory RPCs for an authenticated caller."""

    def __init__(self, db: Database, pepper: bytes, limits: Limits | None = None) -> None:
        self.db = db
        self.pepper = pepper
        self.limits = limits or Limits()

    def tx(self, caller: Caller, *, timeout_ms: int | None = None, readonly: bool = False):  # type: ignore[no-untyped-def]
        return self.db.tenant_tx(
            caller.tenant_id,
            key_id=caller.key.key_id,
            principal=caller.principal,
            method=caller.method,
            timeout_ms=min(
                timeout_ms or self.limits.statement_timeout_ms, self.limits.statement_timeout_ms
            ),
            readonly=readonly,
        )

    def _labels(self, caller: Caller, requested: list[str]) -> list[str]:
        held = caller.key.labels
        if not requested:
            return [DEFAULT_LABEL] if DEFAULT_LABEL in held else sorted(held)
        extra = set(requested) - held
        if extra:
            raise PermissionDenied(
                f"memory.labels: this key cannot grant label(s) {sorted(extra)}; "
                f"it holds {sorted(held)}"
            )
        return requested

    def new_memory(
        self, caller: Caller, draft: common_pb2.MemoryDraft, *, status: str, change: str
    ) -> sql.NewMemory:
        """Validate a draft against the caller's scope and build the row to insert."""
        scope = caller.scope
        namespace = check.name("scope.namespace", scope.namespace, required=True)
        check.name("scope.user_id", scope.user_id)
        check.name("scope.session_id", scope.session_id)
        content = check.content("memory.content", draft.content)
        now = datetime.now(UTC)
        valid_from = check.timestamp(draft.valid_from, draft.HasField("valid_from")) or now
        valid_to = check.timestamp(draft.valid_to, draft.HasField("valid_to"))
        if valid_to is not None and valid_to < valid_from:
            raise InvalidArgument("memory.valid_to", "must not be before memory.valid_from")
        expires_at = check.timestamp(draft.expires_at, draft.HasField("expires_at"))
        labels = self._labels(
            caller, check.names("memory.labels", draft.labels, limit=check.MAX_LABELS)
        )
        return sql.NewMemory(
            namespace=namespace,
            user_id=scope.user_id,
            session_id=scope.session_id,
            content=content,
            fingerprint=fingerprint(self.pepper, content),
            kind=check.text("memory.kind", draft.kind, limit=64) or DEFAULT_KIND,
            tags=check.tags("memory.tags", draft.tags),
            metadata=check.metadata("memory.metadata", dict(draft.metadata)),
            labels=labels,
            status=status,
            confidence=check.unit_interval(
                "memory.confidence", draft.confidence if draft.HasField("confidence") else 1.0
            ),
            importance=check.unit_interval(
                "memory.importance", draft.importance if draft.HasField("importance") else 0.5
            ),
            valid_from=valid_from,
            valid_to=valid_to,
            expires_at=expires_at,
            created_by=caller.principal,
            changed_by_key=caller.key.key_id,
            change=change,
        )

    async def save(
        self, caller: Caller, req: memory_pb2.SaveMemoryRequest, timeout_ms: int | None = None
    ) -> tuple[asyncpg.Record, int]:
        new = self.new_memory(caller, req.memory, status="active", change="save")
        async with self.tx(caller, timeout_ms=timeout_ms) as conn:
            row = await sql.insert_memory(conn, caller.tenant_id, new)
        return row, memory_pb2.SAVE_OUTCOME_CREATED

    async def get(
        self, caller: Caller, req: memory_pb2.GetMemoryRequest, timeout_ms: int | None = None
    ) -> asyncpg.Record:
        memory_id = check.memory_id("id", req.id)
        t = time_coords(req.time, default_any_valid=True)
        async with self.tx(caller, timeout_ms=timeout_ms, readonly=True) as conn:
            row = await sql.get_memory(conn, Visibility.of(caller), memory_id, t)
        if row is None:
            raise memory_not_found(req.id)
        return row

    async def search(
        self, caller: Caller, req: memory_pb2.SearchMemoriesRequest, timeout_ms: int | None = None
    ) -> list[Hit]:
        query = check.query("query", req.query)
        limit = req.limit or DEFAULT_SEARCH_LIMIT
        if not 0 < limit <= self.limits.max_page_size:
            raise InvalidArgument("limit", f"must be between 1 and {self.limits.max_page_size}")
        f = row_filter(req.filter)
        t = time_coords(req.time, default_any_valid=False)
        async with self.tx(caller, timeout_ms=timeout_ms, readonly=True) as conn:
            rows = await sql.search_lexical(conn, Visibility.of(caller), query, limit, f, t)
        return [
            Hit(
                row=r,
                score=float(r["lexical_score"]),
                lexical_rank=i + 1,
                semantic_rank=0,
                lexical_score=float(r["lexical_score"]),
                semantic_similarity=0.0,
            )
            for i, r in enumerate(rows)
        ]


def new_uuid() -> uuid.UUID:
    return uuid.uuid4()
