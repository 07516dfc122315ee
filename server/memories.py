"""The memory domain: defaults, validation and the transaction behind each memory RPC.

Each method validates everything before it opens a transaction, and every statement
it runs carries the caller's visibility predicate, so a row outside scope behaves
exactly like a row that does not exist.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import asyncpg
import structlog
from google.protobuf.message import Message

from brain.authz import Caller, Permission
from brain.v1 import common_pb2, memory_pb2

from . import context, convert, cursors, quotas, retrieval
from . import validation as check
from .convert import PROTO_TO_STATUS
from .embedders import Embedder, EmbedderError, NoEmbedder
from .errors import (
    AlreadyExists,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    PermissionDenied,
    Unavailable,
    memory_not_found,
    supersede_target_not_found,
)
from .rerankers import Reranker, RerankerError
from .retrieval import FusedHit, RetrievalParams
from .storage import memories as sql
from .storage.db import Database
from .storage.visibility import Visibility

DEFAULT_LABEL = "team"
DEFAULT_KIND = "note"
DEFAULT_SEARCH_LIMIT = 10
DEFAULT_PAGE_SIZE = 50
EXPORT_BATCH = 200
MAX_SUPERSEDES = 100
ALL_STATUSES = tuple(PROTO_TO_STATUS.values())
UPDATABLE_FIELDS = frozenset(
    {"content", "kind", "tags", "metadata", "labels", "confidence", "importance",
     "valid_from", "valid_to", "expires_at"}
)  # fmt: skip

if TYPE_CHECKING:
    from .review import Review

_log = structlog.get_logger("brain.memories")


@dataclass(frozen=True)
class Limits:
    max_page_size: int = 100
    statement_timeout_ms: int = 10_000
    # How long an idempotency key replays its first response.
    idempotency_retention: timedelta = timedelta(hours=24)
    # Off only in tests proving that row-level security holds on its own.
    app_filter: bool = True


Hit = FusedHit


@dataclass(frozen=True)
class Recalled:
    """A search's hits, best first, and how they were ordered (a `memory_pb2.Ranking`)."""

    hits: list[FusedHit]
    ranking: int


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


def request_hash(pepper: bytes, method: str, request: Message) -> bytes:
    """What an idempotency key is bound to: the method and the exact request body, as a
    keyed hash (like fingerprints), so the record is no confirmable copy of the content."""
    body = request.SerializeToString(deterministic=True)
    return hmac.new(pepper, b"request:" + method.encode() + b"\0" + body, hashlib.sha256).digest()


class Memories:
    """Carries out memory RPCs for an authenticated caller."""

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
        self.review: Review | None = None

    # -- plumbing -----------------------------------------------------------------

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
        return Visibility.of(caller, app_filter=self.limits.app_filter)

    def page_size(self, field: str, requested: int, default: int) -> int:
        size = requested or default
        if not 0 < size <= self.limits.max_page_size:
            raise InvalidArgument(field, f"must be between 1 and {self.limits.max_page_size}")
        return size

    async def replay(
        self, conn: asyncpg.Connection, caller: Caller, idempotency_key: str, request: Message
    ) -> common_pb2.Memory | None:
        """When this idempotency key was used before for this request, the memory it produced
        as it is now, read through the visibility predicate (the record holds no content, so
        a replay after a forget shows the retracted memory, and one the caller can no longer
        see answers NOT_FOUND)."""
        if not idempotency_key:
            return None
        digest = request_hash(self.pepper, caller.method, request)
        earlier = await sql.claim_idempotency_key(
            conn,
            caller.tenant_id,
            caller.key.key_id,
            idempotency_key,
            caller.method,
            digest,
            self.limits.idempotency_retention,
        )
        if earlier is None:
            return None
        if earlier["method"] != caller.method or bytes(earlier["request_hash"]) != digest:
            raise AlreadyExists(
                "idempotency_key: already used by this key for a different request; "
                "use a new key for a new request"
            )
        row = None
        if earlier["memory_id"] is not None:
            row = await sql.get_memory(
                conn,
                self.visibility(caller),
                earlier["memory_id"],
                sql.TimeCoords(any_valid_time=True),
            )
        if row is None:
            raise memory_not_found()
        return convert.shown(row, caller.has(Permission.READ.value))

    async def remember(
        self, conn: asyncpg.Connection, caller: Caller, idempotency_key: str, memory_id: str
    ) -> None:
        """Bind the idempotency key to the memory this request produced (its id only)."""
        if idempotency_key:
            await sql.store_idempotent_result(
                conn, caller.tenant_id, caller.key.key_id, idempotency_key, uuid.UUID(memory_id)
            )

    def labels(self, caller: Caller, requested: list[str]) -> list[str]:
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

    def relabel_check(
        self, caller: Caller, current: asyncpg.Record, requested: list[str]
    ) -> list[str]:
        """The labels an update may set. A key grants only labels it holds (keeping one
        the memory already has is no grant) and likewise revokes only those: dropping a
        label it does not hold would take the memory from readers it cannot speak for.
        The messages name no label the key does not hold."""
        held, present = caller.key.labels, set(current["labels"])
        requested = requested or self.labels(caller, [])
        extra = set(requested) - held - present
        if extra:
            raise PermissionDenied(
                f"patch.labels: this key cannot grant label(s) {sorted(extra)}; "
                f"it holds {sorted(held)}"
            )
        if not present - held <= set(requested):
            raise PermissionDenied(
                "patch.labels: this key cannot remove labels it does not hold; keep the "
                "memory's other labels, or ask a key that holds them"
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
        labels = self.labels(
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
            expires_at=check.timestamp(draft.expires_at, draft.HasField("expires_at")),
            created_by=caller.principal,
            changed_by_key=caller.key.key_id,
            change=change,
        )

    @staticmethod
    def supersede_ids(values: Sequence[str]) -> list[uuid.UUID]:
        if len(values) > MAX_SUPERSEDES:
            raise InvalidArgument("supersedes", f"at most {MAX_SUPERSEDES} ids")
        return sorted({check.memory_id("supersedes", v) for v in values})

    @staticmethod
    async def refuse_tombstoned(
        conn: asyncpg.Connection,
        vis: Visibility,
        field: str,
        namespace: str,
        user_id: str,
        session_id: str,
        value: bytes,
    ) -> None:
        """FAILED_PRECONDITION when a tombstone that binds this caller holds the value."""
        tombstones = await sql.live_tombstones(conn, vis, namespace, user_id, session_id, value)
        if tombstones:
            raise FailedPrecondition(
                f"{field}: this value was forgotten or rejected in this bucket (tombstone "
                f"{tombstones[0]}); a reviewer must re-admit it before it can be stored again"
            )

    @staticmethod
    def require_write_power(field: str, row: asyncpg.Record) -> None:
        """A row the caller can read but may change only by proposing (``write_predicate``).

        PERMISSION_DENIED tells nothing new: the caller can read the row."""
        if not row["writable"]:
            raise PermissionDenied(
                f"{field}: memory {row['memory_id']} is outside this key's write scope: a key "
                "confined to a user changes team-shared memories (and a key confined to a "
                "session the user's session-less ones) only by proposing; use ProposeMemory "
                "with supersedes, or a key not confined to a user"
            )

    async def refuse_unreviewed_change(
        self, conn: asyncpg.Connection, caller: Caller, namespace: str, field: str
    ) -> None:
        """In a review-required namespace a non-reviewer changes content only by proposing."""
        if self.review is not None and await self.review.review_required(conn, caller, namespace):
            raise FailedPrecondition(
                f"{field}: namespace {namespace} is review-required, so a key without "
                "memories:review changes its memories only through review; propose the new "
                "value with ProposeMemory (or SaveMemory) and supersedes=[id]"
            )

    async def lock_targets(
        self,
        conn: asyncpg.Connection,
        vis: Visibility,
        ids: list[uuid.UUID],
        *,
        direct: bool = True,
    ) -> list[asyncpg.Record]:
        """Lock every memory to supersede; any missing or invisible one fails the write.

        A ``direct`` supersede (not an approved proposal) also needs write power."""
        targets = []
        for target_id in ids:  # sorted: concurrent writers lock in the same order
            row = await sql.lock_current(conn, vis, target_id)
            if row is None:
                raise supersede_target_not_found()
            if direct:
                self.require_write_power("supersedes", row)
            if row["status"] != "active":
                raise FailedPrecondition(
                    f"supersedes: memory {target_id} is {row['status']}, not active; "
                    "only active memories can be superseded"
                )
            targets.append(row)
        return targets

    async def insert_new(
        self,
        conn: asyncpg.Connection,
        caller: Caller,
        new: sql.NewMemory,
        targets: list[asyncpg.Record],
    ) -> asyncpg.Record:
        """Insert ``new`` and mark ``targets`` superseded by it, at one transaction time."""
        await quotas.reserve_memories(conn, adding=1 - len(targets))
        memory_id = cursors.uuid7()
        at = await sql.clock(conn)
        new = replace(new, supersedes=[t["memory_id"] for t in targets])
        row = await sql.insert_memory(conn, caller.tenant_id, new, memory_id, at)
        await self.mark_superseded(conn, caller, targets, memory_id, at)
        return row

    @staticmethod
    async def mark_superseded(
        conn: asyncpg.Connection,
        caller: Caller,
        targets: Sequence[asyncpg.Record],
        replacement: uuid.UUID,
        at: datetime,
    ) -> None:
        """Close each locked target with a version that names its replacement."""
        for target in targets:
            await sql.new_version(
                conn,
                target,
                at,
                {
                    "status": "superseded",
                    "superseded_by": [*target["superseded_by"], replacement],
                    "change": "supersede",
                    "changed_by": caller.principal,
                    "changed_by_key": caller.key.key_id,
                },
            )

    # -- RPCs ---------------------------------------------------------------------

    async def save(
        self, caller: Caller, req: memory_pb2.SaveMemoryRequest, timeout_ms: int | None = None
    ) -> memory_pb2.SaveMemoryResponse:
        new = self.new_memory(caller, req.memory, status="active", change="save")
        new.embedding, new.embedding_model = await self.embed_content(new.content)
        supersedes = self.supersede_ids(req.supersedes)
        idem = check.text("idempotency_key", req.idempotency_key, limit=128)
        vis = self.visibility(caller)
        async with self.tx(caller, timeout_ms=timeout_ms) as conn:
            replayed = await self.replay(conn, caller, idem, req)
            if replayed is not None:
                return memory_pb2.SaveMemoryResponse(
                    memory=replayed, outcome=memory_pb2.SAVE_OUTCOME_REPLAYED
                )
            if self.review is not None and await self.review.review_required(
                conn, caller, new.namespace
            ):
                response = await self.review.save_as_candidate(conn, caller, new, supersedes)
                await self.remember(conn, caller, idem, response.memory.id)
                return response
            await sql.lock_value(conn, caller.tenant_id, new)
            await self.refuse_tombstoned(
                conn, vis, "memory.content", new.namespace, new.user_id, new.session_id,
                new.fingerprint,
            )  # fmt: skip
            # A key that may not read gets no existing row back: its save is stored anew.
            duplicate = None
            if not supersedes and caller.has(Permission.READ.value):
                duplicate = await sql.find_duplicate(conn, vis, new)
            if duplicate is not None:
                response = memory_pb2.SaveMemoryResponse(
                    memory=convert.memory(duplicate),
                    outcome=memory_pb2.SAVE_OUTCOME_DEDUPLICATED,
                )
            else:
                targets = await self.lock_targets(conn, vis, supersedes)
                row = await self.insert_new(conn, caller, new, targets)
                response = memory_pb2.SaveMemoryResponse(
                    memory=convert.memory(row), outcome=memory_pb2.SAVE_OUTCOME_CREATED
                )
            await self.remember(conn, caller, idem, response.memory.id)
        return response

    async def get(
        self, caller: Caller, req: memory_pb2.GetMemoryRequest, timeout_ms: int | None = None
    ) -> memory_pb2.GetMemoryResponse:
        memory_id = check.memory_id("id", req.id)
        t = time_coords(req.time, default_any_valid=True)
        async with self.tx(caller, timeout_ms=timeout_ms, readonly=True, replica=True) as conn:
            row = await sql.get_memory(conn, self.visibility(caller), memory_id, t)
        if row is None:
            raise memory_not_found()
        return memory_pb2.GetMemoryResponse(memory=convert.memory(row))

    async def update(
        self, caller: Caller, req: memory_pb2.UpdateMemoryRequest, timeout_ms: int | None = None
    ) -> memory_pb2.UpdateMemoryResponse:
        memory_id = check.memory_id("id", req.id)
        paths = set(req.update_mask.paths)
        if not paths:
            raise InvalidArgument("update_mask", "name at least one field to change")
        unknown = paths - UPDATABLE_FIELDS
        if unknown:
            raise InvalidArgument(
                "update_mask",
                f"cannot update {sorted(unknown)}; updatable: {sorted(UPDATABLE_FIELDS)}",
            )
        patch = req.patch
        changes: dict[str, Any] = {}
        if "content" in paths:
            changes["content"] = check.content("patch.content", patch.content)
            changes["fingerprint"] = fingerprint(self.pepper, changes["content"])
            vector, model = await self.embed_content(changes["content"])
            changes["embedding"] = vector
            changes["embedding_model"] = model
        if "kind" in paths:
            changes["kind"] = check.text("patch.kind", patch.kind, limit=64) or DEFAULT_KIND
        if "tags" in paths:
            changes["tags"] = check.tags("patch.tags", patch.tags)
        if "metadata" in paths:
            changes["metadata"] = check.metadata("patch.metadata", dict(patch.metadata))
        if "labels" in paths:
            # Checked against the memory's labels once it is locked (relabel_check).
            changes["labels"] = check.names("patch.labels", patch.labels, limit=check.MAX_LABELS)
        if "confidence" in paths:
            changes["confidence"] = check.unit_interval(
                "patch.confidence", patch.confidence if patch.HasField("confidence") else 1.0
            )
        if "importance" in paths:
            changes["importance"] = check.unit_interval(
                "patch.importance", patch.importance if patch.HasField("importance") else 0.5
            )
        if "valid_from" in paths:
            changes["valid_from"] = check.timestamp(
                patch.valid_from, patch.HasField("valid_from")
            ) or datetime.now(UTC)
        if "valid_to" in paths:
            changes["valid_to"] = check.timestamp(patch.valid_to, patch.HasField("valid_to"))
        if "expires_at" in paths:
            changes["expires_at"] = check.timestamp(patch.expires_at, patch.HasField("expires_at"))
        idem = check.text("idempotency_key", req.idempotency_key, limit=128)
        vis = self.visibility(caller)
        async with self.tx(caller, timeout_ms=timeout_ms) as conn:
            replayed = await self.replay(conn, caller, idem, req)
            if replayed is not None:
                return memory_pb2.UpdateMemoryResponse(memory=replayed)
            current = await sql.lock_current(conn, vis, memory_id)
            if current is None:
                raise memory_not_found()
            self.require_write_power("id", current)
            if "labels" in changes:
                changes["labels"] = self.relabel_check(caller, current, changes["labels"])
            await self.refuse_unreviewed_change(conn, caller, current["namespace"], "id")
            if req.expected_version and current["version"] != req.expected_version:
                raise Conflict(
                    f"expected_version: memory {req.id} is at version {current['version']}, "
                    f"not {req.expected_version}; read it again and retry"
                )
            if current["status"] != "active":
                raise FailedPrecondition(
                    f"memory {req.id} is {current['status']}; only active memories can be updated"
                )
            valid_from = changes.get("valid_from", current["valid_from"])
            valid_to = changes.get("valid_to", current["valid_to"])
            if valid_to is not None and valid_to < valid_from:
                raise InvalidArgument("patch.valid_to", "must not be before valid_from")
            if "fingerprint" in changes and changes["fingerprint"] != current["fingerprint"]:
                await self.refuse_tombstoned(
                    conn, vis, "patch.content", current["namespace"], current["user_id"],
                    current["session_id"], changes["fingerprint"],
                )  # fmt: skip
            at = await sql.clock(conn)
            changes.update(
                change="update", changed_by=caller.principal, changed_by_key=caller.key.key_id
            )
            row = await sql.new_version(conn, current, at, changes, shown_to=vis)
            # The row holds fields this request did not set: a key without read sees a receipt.
            response = memory_pb2.UpdateMemoryResponse(
                memory=convert.shown(row, caller.has(Permission.READ.value))
            )
            await self.remember(conn, caller, idem, response.memory.id)
        return response

    async def forget(
        self, caller: Caller, req: memory_pb2.ForgetMemoryRequest, timeout_ms: int | None = None
    ) -> memory_pb2.ForgetMemoryResponse:
        memory_id = check.memory_id("id", req.id)
        reason = check.text("reason", req.reason, limit=500)
        vis = self.visibility(caller)
        async with self.tx(caller, timeout_ms=timeout_ms) as conn:
            current = await sql.lock_current(conn, vis, memory_id)
            if current is None:
                raise memory_not_found()
            # Forget is erasure, not a belief change: it needs write power and
            # memories:forget, but no review, even in a review-required namespace.
            self.require_write_power("id", current)
            if current["status"] == "retracted":  # forgetting twice is a no-op
                tombstone = await conn.fetchval(
                    "SELECT tombstone_id FROM tombstones WHERE memory_id = $1 "
                    "ORDER BY created_at LIMIT 1",
                    memory_id,
                )
                return memory_pb2.ForgetMemoryResponse(id=req.id, tombstone_id=str(tombstone or ""))
            tombstones = {
                fp: await sql.add_tombstone(
                    conn, current["tenant_id"], current, fp, "forget", caller.principal
                )
                for fp in await sql.version_fingerprints(
                    conn, current["tenant_id"], current["memory_id"]
                )
            }
            await sql.erase_all_versions(conn, current["tenant_id"], current["memory_id"])
            at = await sql.clock(conn)
            await sql.new_version(
                conn,
                current,
                at,
                {
                    "status": "retracted",
                    "change": "forget",
                    "changed_by": caller.principal,
                    "changed_by_key": caller.key.key_id,
                    "review_reason": reason or None,
                },
            )
        main = tombstones.get(bytes(current["fingerprint"])) if current["fingerprint"] else None
        return memory_pb2.ForgetMemoryResponse(id=req.id, tombstone_id=str(main or ""))

    async def history(
        self,
        caller: Caller,
        req: memory_pb2.GetMemoryHistoryRequest,
        timeout_ms: int | None = None,
    ) -> memory_pb2.GetMemoryHistoryResponse:
        memory_id = check.memory_id("id", req.id)
        async with self.tx(caller, timeout_ms=timeout_ms, readonly=True, replica=True) as conn:
            rows = await sql.history(conn, self.visibility(caller), memory_id)
        if not rows:
            raise memory_not_found()
        return memory_pb2.GetMemoryHistoryResponse(versions=[convert.memory(r) for r in rows])

    async def list_page(
        self, caller: Caller, req: memory_pb2.ListMemoriesRequest, timeout_ms: int | None = None
    ) -> memory_pb2.ListMemoriesResponse:
        size = self.page_size("page_size", req.page_size, DEFAULT_PAGE_SIZE)
        f = row_filter(req.filter)
        t = time_coords(req.time, default_any_valid=False)
        after = None
        if req.page_token:
            data = self.tokens.decode("page_token", req.page_token)
            after = cursors.get_uuid("page_token", data, "k")
            # A token pins the snapshot its first page saw, so pages never shift.
            t = replace(t, as_of=cursors.get_time("page_token", data, "a"))
        if t.as_of is None:
            t = replace(t, as_of=datetime.now(UTC))
        async with self.tx(caller, timeout_ms=timeout_ms, readonly=True, replica=True) as conn:
            rows = await sql.list_page(conn, self.visibility(caller), f, t, after, size + 1)
        more = len(rows) > size
        rows = rows[:size]
        token = ""
        if more and t.as_of is not None:
            token = self.tokens.encode({"k": str(rows[-1]["memory_id"]), "a": t.as_of.isoformat()})
        return memory_pb2.ListMemoriesResponse(
            memories=[convert.memory(r) for r in rows], next_page_token=token
        )

    async def export(
        self, caller: Caller, req: memory_pb2.ExportMemoriesRequest
    ) -> AsyncIterator[memory_pb2.ExportMemoriesResponse]:
        f = replace(row_filter(req.filter, ALL_STATUSES), hide_expired=False)
        after: tuple[uuid.UUID, int] | None = None
        if req.cursor:
            token = self.tokens.decode("cursor", req.cursor)
            after = (cursors.get_uuid("cursor", token, "k"), cursors.get_int("cursor", token, "v"))
        vis = self.visibility(caller)
        while True:
            async with self.tx(caller, readonly=True, replica=True) as conn:
                rows = await sql.export_page(conn, vis, f, req.include_history, after, EXPORT_BATCH)
            for row in rows:
                after = (row["memory_id"], row["version"])
                yield memory_pb2.ExportMemoriesResponse(
                    memory=convert.memory(row),
                    cursor=self.tokens.encode({"k": str(after[0]), "v": after[1]}),
                )
            if len(rows) < EXPORT_BATCH:
                return

    async def search(
        self, caller: Caller, req: memory_pb2.SearchMemoriesRequest, timeout_ms: int | None = None
    ) -> Recalled:
        limit = self.page_size("limit", req.limit, DEFAULT_SEARCH_LIMIT)
        return await self.recall(
            caller, req.query, limit, req.filter, req.time, timeout_ms,
            mode=req.mode or memory_pb2.SEARCH_MODE_HYBRID, query_embedding=req.query_embedding,
        )  # fmt: skip

    async def build_context(
        self, caller: Caller, req: memory_pb2.BuildContextRequest, timeout_ms: int | None = None
    ) -> memory_pb2.BuildContextResponse:
        token_budget, count = context.budget(req)
        found = await self.recall(caller, req.query, count, req.filter, req.time, timeout_ms)
        return context.pack(found.hits, token_budget)

    async def recall(
        self,
        caller: Caller,
        query_text: str,
        limit: int,
        filter_: common_pb2.MemoryFilter,
        time: common_pb2.TimeTravel,
        timeout_ms: int | None,
        *,
        mode: int = memory_pb2.SEARCH_MODE_HYBRID,
        query_embedding: Sequence[float] = (),
    ) -> Recalled:
        """Ranked hits for a query: every lane filtered by scope, status and time first.

        A configured reranker then reorders the fused top N (outside the transaction).
        """
        query = check.query("query", query_text)
        f = row_filter(filter_)
        t = time_coords(time, default_any_valid=False)
        if mode not in memory_pb2.SearchMode.values():
            raise InvalidArgument("mode", f"unknown search mode {mode}")
        vector = None
        if mode != memory_pb2.SEARCH_MODE_LEXICAL:
            try:
                vector = await self.query_vector(query, query_embedding)
            except EmbedderError as exc:
                if mode == memory_pb2.SEARCH_MODE_SEMANTIC:
                    raise Unavailable(
                        "the embedder is unavailable, so semantic search cannot run now; "
                        "hybrid and lexical search still work"
                    ) from exc
                _log.warning("query embedding failed; lexical only", error=str(exc))
            if vector is None and mode == memory_pb2.SEARCH_MODE_SEMANTIC:
                raise FailedPrecondition(
                    "mode: semantic search needs an embedder; this server runs with "
                    "--embedder none (pass query_embedding, or use hybrid or lexical)"
                )
        n = max(limit, self.params.candidates)
        vis = self.visibility(caller)
        model = self.embedding_model
        async with self.tx(caller, timeout_ms=timeout_ms, readonly=True, replica=True) as conn:
            lexical: list[retrieval.LaneHit] = []
            exact: list[retrieval.LaneHit] = []
            if mode != memory_pb2.SEARCH_MODE_SEMANTIC and retrieval.uses_term_statistics(f, t):
                lexical, exact = await retrieval.lexical_lanes(
                    conn, vis, query, f, t, n, self.params
                )
            elif mode != memory_pb2.SEARCH_MODE_SEMANTIC:
                size = await retrieval.corpus_size(conn, vis, f, t)
                lexical = await retrieval.lexical_lane(
                    conn, vis, query, f, t, n, self.params, corpus_size=size
                )
                exact = await retrieval.lexical_lane(
                    conn, vis, query, f, t, n, self.params, config="simple", corpus_size=size
                )
            semantic: list[retrieval.LaneHit] = []
            if vector is not None:
                if mode == memory_pb2.SEARCH_MODE_HYBRID:
                    vector = await retrieval.feedback_vector(
                        conn, vis, vector, lexical, self.params, model
                    )
                semantic = await retrieval.semantic_lane(
                    conn, vis, vector, f, t, n, self.params, model=model
                )
        depth = max(limit, self.reranker.top_n) if self.reranker is not None else limit
        fused = retrieval.fuse(lexical, semantic, depth, self.params, exact=exact)
        return await self.rerank(query, fused, limit)

    async def rerank(self, query: str, hits: list[FusedHit], limit: int) -> Recalled:
        """The reranker's order for the top N, the rest after them in fused order.

        Like a failing embedder, a failing reranker never fails a search: the fused order
        is returned, and the ranking says so.
        """
        if self.reranker is None or not hits:
            return Recalled(hits[:limit], memory_pb2.RANKING_FUSED)
        head = hits[: self.reranker.top_n]
        try:
            scores = await self.reranker.rerank(query, [h.row["content"] for h in head])
        except RerankerError as exc:
            _log.warning("reranking failed; fused order returned", error=str(exc))
            return Recalled(hits[:limit], memory_pb2.RANKING_FUSED_RERANKER_UNAVAILABLE)
        for hit, score in zip(head, scores, strict=True):
            hit.rerank_score = score
        head = sorted(head, key=lambda h: -h.rerank_score)  # stable: ties keep fused order
        return Recalled((head + hits[len(head) :])[:limit], memory_pb2.RANKING_RERANKED)

    @property
    def embedding_model(self) -> str | None:
        """What stored vectors were made by; vectors of another model are not compared."""
        return model_id(self.embedder)

    async def query_vector(self, query: str, given: Sequence[float]) -> list[float] | None:
        if given:
            if len(given) != self.embedding_dimension:
                raise InvalidArgument(
                    "query_embedding",
                    f"has {len(given)} values; this server's embeddings have "
                    f"{self.embedding_dimension} dimensions",
                )
            if not all(math.isfinite(x) for x in given):
                raise InvalidArgument("query_embedding", "must hold finite numbers")
            return list(given)
        if self.embedder.dimension == 0:
            return None
        return (await self.embedder.embed([query]))[0]

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
