"""ListConflicts, ResolveConflict and ConsolidateMemories (issue 30).

A conflict is decided like a candidate: by a key with ``memories:review`` that is not the
principal whose write found it, seeing both memories. Approval supersedes the older
memory by the newer one — after checking again that the newer still reaches every reader
of the older — and rejection lets both stand for good. A conflict the caller cannot see
both memories of answers NOT_FOUND, byte-identical to a random id.
"""

from __future__ import annotations

from datetime import timedelta

from brain.authz import Caller
from brain.server.domain import convert, cursors, quotas
from brain.server.domain import validation as check
from brain.server.domain.conflicts import consolidation
from brain.server.domain.conflicts.detectors import RESTATED
from brain.server.domain.conflicts.service import (
    PROTO_TO_STATE,
    conflict,
    reaches_readers,
)
from brain.server.domain.memories import DEFAULT_PAGE_SIZE, Memories
from brain.server.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from brain.server.storage import conflicts as sql
from brain.server.storage import memories as memory_sql
from brain.v1 import review_pb2

CONFLICT_NOT_FOUND = "conflict not found"
DEFAULT_CLUSTERS = 20
MAX_CLUSTERS = 100
CANDIDATE_TTL = timedelta(days=7)


def conflict_not_found() -> NotFound:
    """The one NOT_FOUND for a conflict id: identical for missing and invisible ones."""
    return NotFound(CONFLICT_NOT_FOUND)


class ConflictReview:
    """Carries out the conflict RPCs of ReviewService."""

    def __init__(self, memories: Memories) -> None:
        self.memories = memories

    async def list(
        self, caller: Caller, req: review_pb2.ListConflictsRequest, timeout_ms: int | None = None
    ) -> review_pb2.ListConflictsResponse:
        m = self.memories
        size = m.page_size("page_size", req.page_size, DEFAULT_PAGE_SIZE)
        states = []
        for s in req.states:
            if s not in PROTO_TO_STATE:
                raise InvalidArgument("states", f"cannot list conflicts in state {s}")
            states.append(PROTO_TO_STATE[s])
        memory_id = check.memory_id("memory_id", req.memory_id) if req.memory_id else None
        before = None
        if req.page_token:
            before = cursors.get_uuid(
                "page_token",
                m.tokens.decode(caller, "page_token", req.page_token, kind=cursors.Kind.CONFLICTS),
                "c",
            )
        async with m.tx(caller, timeout_ms=timeout_ms, readonly=True) as conn:
            rows = await sql.page(
                conn, m.visibility(caller), states or ["open"], memory_id, before, size + 1
            )
        token = ""
        if len(rows) > size:
            token = m.tokens.encode(
                caller, {"c": str(rows[size - 1]["conflict_id"])}, kind=cursors.Kind.CONFLICTS
            )
        return review_pb2.ListConflictsResponse(
            conflicts=[conflict(r) for r in rows[:size]], next_page_token=token
        )

    async def resolve(
        self,
        caller: Caller,
        req: review_pb2.ResolveConflictRequest,
        timeout_ms: int | None = None,
    ) -> review_pb2.ResolveConflictResponse:
        m = self.memories
        conflict_id = check.memory_id("id", req.id, "conflict")
        if req.decision not in (
            review_pb2.REVIEW_DECISION_APPROVE,
            review_pb2.REVIEW_DECISION_REJECT,
        ):
            raise InvalidArgument("decision", "must be APPROVE or REJECT")
        reason = check.text("reason", req.reason, limit=1000).strip()
        if not reason:
            raise InvalidArgument("reason", "is required: say why you approve or reject")
        vis = m.visibility(caller)
        async with m.tx(caller, timeout_ms=timeout_ms) as conn:
            row = await sql.lock(conn, vis, conflict_id)
            if row is None:
                raise conflict_not_found()
            if row["state"] != "open":
                raise FailedPrecondition(f"conflict {req.id} is {row['state']}, not open")
            if row["detected_by"] == caller.principal:
                raise PermissionDenied(
                    "a conflict cannot be resolved by the principal whose write found it; "
                    "ask another reviewer"
                )
            # Both memories, locked in id order (as every writer locks them).
            locked = {}
            for memory_id in sorted((row["newer_id"], row["older_id"])):
                current = await memory_sql.lock_current(conn, vis, memory_id)
                if current is None:  # both were visible a statement ago: gone meanwhile
                    raise conflict_not_found()
                locked[memory_id] = current
            newer, older = locked[row["newer_id"]], locked[row["older_id"]]
            at = await memory_sql.clock(conn)
            if req.decision == review_pb2.REVIEW_DECISION_REJECT:
                decided = await sql.decide(conn, row, "dismissed", caller.principal, at, reason)
            else:
                if newer["created_by"] == caller.principal:
                    # Applying it puts the caller's own memory in place of another's: the
                    # change a proposal needs someone else to approve (it was approved, but
                    # not as a supersede), so not decided by its author.
                    raise PermissionDenied(
                        "a conflict cannot be approved by the author of its newer memory; "
                        "ask another reviewer"
                    )
                for which, memory in (("newer", newer), ("older", older)):
                    if memory["status"] != "active":
                        raise FailedPrecondition(
                            f"the {which} memory {memory['memory_id']} is {memory['status']}, "
                            "not active; this conflict can only be rejected"
                        )
                if not reaches_readers(newer, older):
                    raise FailedPrecondition(
                        "the newer memory no longer reaches every reader of the older one "
                        "(its user, session, labels or expiry changed); reject this conflict"
                    )
                decided = await sql.decide(conn, row, "resolved", caller.principal, at, reason)
                await m.mark_superseded(conn, caller, [older], newer["memory_id"], at)
            shown = [
                await memory_sql.get_memory(
                    conn, vis, memory_id, memory_sql.TimeCoords(any_valid_time=True)
                )
                for memory_id in (row["newer_id"], row["older_id"])
            ]
        return review_pb2.ResolveConflictResponse(
            conflict=conflict(decided),
            newer=convert.memory(shown[0]) if shown[0] is not None else None,
            older=convert.memory(shown[1]) if shown[1] is not None else None,
        )

    async def consolidate(
        self,
        caller: Caller,
        req: review_pb2.ConsolidateMemoriesRequest,
        timeout_ms: int | None = None,
    ) -> review_pb2.ConsolidateMemoriesResponse:
        m = self.memories
        namespace = check.name("scope.namespace", caller.scope.namespace, required=True)
        min_overlap = RESTATED
        if req.HasField("min_overlap"):
            min_overlap = check.unit_interval("min_overlap", req.min_overlap)
        max_clusters = req.max_clusters or DEFAULT_CLUSTERS
        if not 0 < max_clusters <= MAX_CLUSTERS:
            raise InvalidArgument("max_clusters", f"must be between 1 and {MAX_CLUSTERS}")
        reason = check.text("reason", req.reason, limit=1000).strip() or "consolidation"
        vis = m.visibility(caller)
        out = review_pb2.ConsolidateMemoriesResponse()
        async with m.tx(caller, timeout_ms=timeout_ms) as conn:
            rows = await consolidation.active_rows(conn, vis, namespace)
            found = consolidation.clusters(rows, min_overlap)[:max_clusters]
            if not req.dry_run and found:
                await quotas.reserve_memories(conn, vis, adding=len(found))
            for cluster in found:
                item = review_pb2.Consolidation(
                    source_ids=[str(s["memory_id"]) for s in cluster.sources],
                    chosen_id=str(cluster.chosen["memory_id"]),
                    min_overlap=cluster.min_overlap,
                )
                if not req.dry_run:
                    row = await consolidation.propose(
                        conn, caller.tenant_id, cluster, caller.principal,
                        caller.key.key_id, reason,
                    )  # fmt: skip
                    item.candidate.CopyFrom(convert.memory(row))
                out.consolidations.append(item)
        return out
