"""The memory write path: SaveMemory, UpdateMemory, ForgetMemory and what they share with
review (idempotency, tombstones, write power, supersede locks).

Each method validates everything before it opens a transaction, and every statement it runs
carries the caller's visibility predicate, so a row outside scope behaves exactly like a row
that does not exist.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import asyncpg
import structlog
from google.protobuf.message import Message

from brain.authz import Caller, Permission
from brain.server.domain import convert, cursors, graph, quotas
from brain.server.domain import validation as check
from brain.server.domain.conflicts import consolidation
from brain.server.domain.conflicts.judge import judge_after_commit
from brain.server.domain.conflicts.service import Detection
from brain.server.domain.graph.extraction import ExtractorError
from brain.server.domain.memories import placement
from brain.server.domain.memories._common import (
    DEFAULT_KIND,
    GRAPH_PATH,
    MAX_SUPERSEDES,
    UPDATABLE_FIELDS,
    MemoryBase,
    fingerprint,
    request_hash,
)
from brain.server.errors import (
    AlreadyExists,
    BrainError,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    PermissionDenied,
    memory_not_found,
    supersede_target_not_found,
)
from brain.server.storage import conflicts as conflicts_sql
from brain.server.storage import erasure, idempotency
from brain.server.storage import memories as sql
from brain.server.storage.visibility import Visibility
from brain.v1 import common_pb2, memory_pb2

_log = structlog.get_logger("brain.memories")


class MemoryWrites(MemoryBase):
    """Carries out the memory RPCs that change what the brain believes."""

    @property
    def detection(self) -> Detection:
        """Conflict detection for writes that make a memory ACTIVE (issue 30)."""
        return Detection(self.mark_superseded)

    async def conflicts_of(
        self,
        conn: asyncpg.Connection,
        caller: Caller,
        written: asyncpg.Record,
        vector: Sequence[float] | None,
        model: str | None,
        *,
        proposal: bool = False,
        slots: bool = True,
    ) -> list[common_pb2.Conflict]:
        """What ``written`` conflicts with among the memories the caller sees; nothing for
        a key that may not read (it is told of no other memory). ``slots``: the write may
        have asserted single-valued relations."""
        if not caller.has(Permission.READ.value):
            return []
        return await self.detection.run(
            conn, caller, self.visibility(caller), written, vector, model,
            proposal=proposal, slots=slots,
        )  # fmt: skip

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
        earlier = await idempotency.claim_idempotency_key(
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
            await idempotency.store_idempotent_result(
                conn, caller.tenant_id, caller.key.key_id, idempotency_key, uuid.UUID(memory_id)
            )

    def new_memory(
        self,
        caller: Caller,
        draft: common_pb2.MemoryDraft,
        *,
        status: str,
        change: str,
        successor: bool = False,
    ) -> sql.NewMemory:
        """Validate a draft against the caller's scope and build the row to insert.

        A ``successor``'s labels are decided once what it supersedes is locked
        (`placement.successor`): left unnamed, they are the targets' own."""
        scope = caller.scope
        namespace = check.name("scope.namespace", scope.namespace, required=True)
        check.name("scope.user_id", scope.user_id)
        check.name("scope.session_id", scope.session_id)
        content = check.content("memory.content", draft.content)
        now = datetime.now(UTC)
        valid_from = check.timestamp(draft.valid_from, draft.HasField("valid_from")) or now
        valid_to = check.timestamp(draft.valid_to, draft.HasField("valid_to"))
        if valid_to is not None and valid_to <= valid_from:  # [from, to): empty if equal
            raise InvalidArgument("memory.valid_to", "must be after memory.valid_from")
        expires_at = check.timestamp(draft.expires_at, draft.HasField("expires_at"))
        if expires_at is not None and expires_at <= now:
            # (An update may set a past expiry: that hides a memory now, on purpose.)
            raise InvalidArgument(
                "memory.expires_at",
                "is not in the future: a memory saved already expired would never be "
                "recalled; leave it unset or give a later time",
            )
        labels = check.names("memory.labels", draft.labels, limit=check.MAX_LABELS)
        if not successor:
            labels = placement.granted(caller, labels)
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
        tombstones = await erasure.live_tombstones(conn, vis, namespace, user_id, session_id, value)
        if tombstones:
            raise FailedPrecondition(
                f"{field}: this value was forgotten or rejected in this bucket (tombstone "
                f"{tombstones[0]}); a reviewer must re-admit it before it can be stored again"
            )

    @staticmethod
    def require_write_power(field: str, row: asyncpg.Record, caller: Caller) -> None:
        """A row the caller may change only by proposing (``write_predicate``).

        PERMISSION_DENIED tells nothing new to a caller that can read the row; to one that
        cannot (no ``memories:read``) the row answers as a random id would, so an id is
        never told apart from one that does not exist."""
        if not row["writable"]:
            if not caller.has(Permission.READ.value):
                raise (
                    supersede_target_not_found() if field == "supersedes" else memory_not_found()
                )
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
        writer: Caller | None,
    ) -> list[asyncpg.Record]:
        """Lock every memory to supersede; any missing or invisible one fails the write.

        A direct supersede by ``writer`` also needs its write power; an approved proposal
        (``writer`` None) needs only the reviewer's visibility."""
        targets = []
        for target_id in ids:  # sorted: concurrent writers lock in the same order
            row = await sql.lock_current(conn, vis, target_id)
            if row is None:
                raise supersede_target_not_found()
            if writer is not None:
                self.require_write_power("supersedes", row, writer)
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
        assertions: graph.Assertions = graph.NOTHING,
    ) -> asyncpg.Record:
        """Insert ``new`` and mark ``targets`` superseded by it, at one transaction time;
        the new memory's graph assertions take over from theirs."""
        await quotas.reserve_memories(conn, self.visibility(caller), adding=1 - len(targets))
        memory_id = cursors.uuid7()
        at = await sql.clock(conn)
        new = replace(new, supersedes=[t["memory_id"] for t in targets])
        row = await sql.insert_memory(conn, caller.tenant_id, new, memory_id, at)
        await self.mark_superseded(conn, caller, targets, memory_id, at)
        await graph.assert_graph(
            conn, self.visibility(caller), caller.tenant_id, memory_id, assertions, at,
            pending=False,
        )  # fmt: skip
        return row

    @staticmethod
    async def mark_superseded(
        conn: asyncpg.Connection,
        caller: Caller,
        targets: Sequence[asyncpg.Record],
        replacement: uuid.UUID,
        at: datetime,
    ) -> None:
        """Close each locked target with a version that names its replacement, and retire
        what it asserted in the graph."""
        for target in targets:
            await graph.retire(conn, target["tenant_id"], target["memory_id"], at)
            await conflicts_sql.close_open(conn, target["tenant_id"], target["memory_id"])
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

    async def save(
        self, caller: Caller, req: memory_pb2.SaveMemoryRequest, timeout_ms: int | None = None
    ) -> memory_pb2.SaveMemoryResponse:
        new = self.new_memory(
            caller, req.memory, status="active", change="save", successor=bool(req.supersedes)
        )
        assertions = graph.parse_draft("graph", req.graph, new.valid_from, new.valid_to)
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
                response = await self.review.save_as_candidate(
                    conn, caller, new, supersedes, assertions
                )
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
                targets = await self.lock_targets(conn, vis, supersedes, writer=caller)
                new = placement.successor(caller, new, targets)
                row = await self.insert_new(conn, caller, new, targets, assertions)
                found = await self.conflicts_of(
                    conn, caller, row, new.embedding, new.embedding_model,
                    slots=any(r.cardinality == "one" for r in assertions.relations),
                )  # fmt: skip
                response = memory_pb2.SaveMemoryResponse(
                    memory=convert.memory(row),
                    outcome=memory_pb2.SAVE_OUTCOME_CREATED,
                    conflicts=found,
                )
            await self.remember(conn, caller, idem, response.memory.id)
        if response.outcome == memory_pb2.SAVE_OUTCOME_CREATED and not assertions:
            self.extract_later(caller, uuid.UUID(response.memory.id), new.content)
        self.judge_later(caller, response.conflicts)
        return response

    def judge_later(self, caller: Caller, found: Sequence[common_pb2.Conflict]) -> None:
        """With a judge configured, its advice on the open conflicts a committed write
        recorded (never in the caller's way)."""
        if self.judge is None or not any(c.state == common_pb2.CONFLICT_STATE_OPEN for c in found):
            return
        task = asyncio.create_task(judge_after_commit(self, self.judge, caller, list(found)))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def extract_later(self, caller: Caller, memory_id: uuid.UUID, content: str) -> None:
        """With an extractor configured, propose the graph of a memory saved without one,
        once its save has committed (never in the caller's way, never into the graph).
        The candidate is proposed in the caller's name, so only for keys that may propose."""
        if self.extractor is None or self.review is None:
            return
        if not caller.has(Permission.PROPOSE.value):
            return
        task = asyncio.create_task(self._extract(caller, memory_id, content))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _extract(self, caller: Caller, memory_id: uuid.UUID, content: str) -> None:
        assert self.extractor is not None and self.review is not None
        try:
            draft = await self.extractor.extract(content)
            await self.review.propose_extracted(
                caller, memory_id, content, draft, self.extractor.model
            )
        except ExtractorError as exc:
            _log.warning("graph extraction failed", memory_id=str(memory_id), error=str(exc))
        except BrainError as exc:
            _log.warning("graph extraction not proposed", memory_id=str(memory_id),
                         error=exc.message)  # fmt: skip

    async def update(
        self, caller: Caller, req: memory_pb2.UpdateMemoryRequest, timeout_ms: int | None = None
    ) -> memory_pb2.UpdateMemoryResponse:
        memory_id = check.memory_id("id", req.id)
        paths = set(req.update_mask.paths)
        if not paths:
            raise InvalidArgument("update_mask", "name at least one field to change")
        unknown = paths - UPDATABLE_FIELDS - {GRAPH_PATH}
        if unknown:
            raise InvalidArgument(
                "update_mask",
                f"cannot update {sorted(unknown)}; updatable: "
                f"{sorted(UPDATABLE_FIELDS | {GRAPH_PATH})}",
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
        if req.expected_version < 0:
            raise InvalidArgument("expected_version", "must not be negative (0: any version)")
        idem = check.text("idempotency_key", req.idempotency_key, limit=128)
        vis = self.visibility(caller)
        async with self.tx(caller, timeout_ms=timeout_ms) as conn:
            replayed = await self.replay(conn, caller, idem, req)
            if replayed is not None:
                return memory_pb2.UpdateMemoryResponse(memory=replayed)
            current = await sql.lock_current(conn, vis, memory_id)
            if current is None:
                raise memory_not_found()
            self.require_write_power("id", current, caller)
            if "labels" in changes:
                changes["labels"] = placement.relabelled(caller, current, changes["labels"])
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
            if valid_to is not None and valid_to <= valid_from:
                raise InvalidArgument("patch.valid_to", "must be after valid_from")
            if "fingerprint" in changes and changes["fingerprint"] != current["fingerprint"]:
                await self.refuse_tombstoned(
                    conn, vis, "patch.content", current["namespace"], current["user_id"],
                    current["session_id"], changes["fingerprint"],
                )  # fmt: skip
            # A patch that changes nothing writes nothing: no version, no event. Only for a
            # key that may read the row; to any other the answer would tell what it holds.
            if caller.has(Permission.READ.value) and GRAPH_PATH not in paths:
                same = await sql.unchanged(conn, vis, current, changes)
                if same is not None:
                    await self.remember(conn, caller, idem, str(same["memory_id"]))
                    return memory_pb2.UpdateMemoryResponse(memory=convert.memory(same))
            at = await sql.clock(conn)
            changes.update(
                change="update", changed_by=caller.principal, changed_by_key=caller.key.key_id
            )
            row = await sql.new_version(conn, current, at, changes, shown_to=vis)
            if GRAPH_PATH in paths:
                assertions = graph.parse_draft("graph", req.graph, valid_from, valid_to)
                await graph.replace_graph(
                    conn, vis, current["tenant_id"], current["memory_id"], assertions, at
                )
            if "labels" in changes or "expires_at" in changes:
                await graph.rescope(conn, vis, current["memory_id"], at)
            found: list[common_pb2.Conflict] = []
            if changes.get("fingerprint", current["fingerprint"]) != current["fingerprint"]:
                # What it said before no longer holds: compared anew.
                await conflicts_sql.close_open(conn, current["tenant_id"], current["memory_id"])
                found = await self.conflicts_of(
                    conn, caller, row, changes["embedding"], changes["embedding_model"],
                    slots=GRAPH_PATH in paths,
                )  # fmt: skip
            # The row holds fields this request did not set: a key without read sees a receipt.
            response = memory_pb2.UpdateMemoryResponse(
                memory=convert.shown(row, caller.has(Permission.READ.value)), conflicts=found
            )
            await self.remember(conn, caller, idem, response.memory.id)
        self.judge_later(caller, found)
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
            self.require_write_power("id", current, caller)
            if current["status"] == "retracted":  # forgetting twice is a no-op
                tombstone = await conn.fetchval(
                    "SELECT tombstone_id FROM tombstones WHERE memory_id = $1 "
                    "ORDER BY created_at LIMIT 1",
                    memory_id,
                )
                return memory_pb2.ForgetMemoryResponse(id=req.id, tombstone_id=str(tombstone or ""))
            tombstones = {
                fp: await erasure.add_tombstone(
                    conn, current["tenant_id"], current, fp, "forget", caller.principal
                )
                for fp in await erasure.version_fingerprints(
                    conn, current["tenant_id"], current["memory_id"]
                )
            }
            await erasure.erase_all_versions(conn, current["tenant_id"], current["memory_id"])
            await graph.erase(conn, current["tenant_id"], current["memory_id"])
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
            # The candidates that copied its text (graph extraction) go with it.
            changed = {"change": "forget", "changed_by": caller.principal,
                       "changed_by_key": caller.key.key_id}  # fmt: skip
            await erasure.withdraw_copies(conn, current, list(tombstones), at, changed, graph.erase)
            # Its conflicts, what was consolidated from it, and what it had replaced.
            await consolidation.after_forget(conn, current, at, changed)
        main = tombstones.get(bytes(current["fingerprint"])) if current["fingerprint"] else None
        return memory_pb2.ForgetMemoryResponse(id=req.id, tombstone_id=str(main or ""))
