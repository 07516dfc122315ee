"""Human review: agents propose, a different principal approves or rejects.

Separation of duties is enforced here and nowhere can a request turn it off: the
proposer of a candidate can never review it, whatever permissions its key holds.
Review-required namespaces (set with brain-admin) turn direct saves from keys
without ``memories:review`` into candidates.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import asyncpg

from brain.authz import Caller, Permission
from brain.server.domain import convert, cursors, graph, quotas
from brain.server.domain import validation as check
from brain.server.domain.memories import DEFAULT_PAGE_SIZE, Memories, placement
from brain.server.errors import (
    FailedPrecondition,
    InvalidArgument,
    PermissionDenied,
    ResourceExhausted,
    memory_not_found,
    supersede_target_not_found,
)
from brain.server.storage import conflicts as conflicts_sql
from brain.server.storage import erasure
from brain.server.storage import memories as sql
from brain.server.storage import review as review_sql
from brain.server.storage.visibility import Visibility, reaches_readers
from brain.v1 import memory_pb2, review_pb2
from brain.v1.graph_pb2 import GraphDraft

DEFAULT_CANDIDATE_TTL = timedelta(days=7)
REVIEW_REQUIRED_REASON = "saved into a review-required namespace"


def acts_on(caller: Caller, row: asyncpg.Record, *, review: bool) -> bool:
    """Whether a review, a withdrawal or a proposal's ``supersedes`` may say anything about
    ``row`` beyond NOT_FOUND.

    A key that reads memories may hear why it cannot act on a row it sees. A key without
    ``memories:read`` hears about only what this call acts on: a candidate (a review) or
    a memory of its own principal; any other id answers as a random one, so such a key
    cannot learn that a memory exists, or its status, through these calls.
    """
    if caller.has(Permission.READ.value) or row["created_by"] == caller.principal:
        return True
    return review and row["status"] == "candidate"


async def hidden_from_reviewer(
    conn: asyncpg.Connection, vis: Visibility, row: asyncpg.Record
) -> bool:
    """Whether a candidate is hidden from this review: it would supersede a memory the
    reviewer cannot see (approving it would tell that the memory exists). Such a candidate
    is left out of ListCandidates and answers ReviewCandidate as a random id."""
    return (
        row["status"] == "candidate"
        and row["created_by"] != vis.principal  # a proposer knows what it proposed
        and bool(row["supersedes"])
        and not await review_sql.sees_every_target(conn, vis, row)
    )


def proposal_target(
    caller: Caller, target_id: uuid.UUID, target: asyncpg.Record | None
) -> asyncpg.Record:
    """What a proposal may name in ``supersedes``: a memory it sees and that is active.

    A key that cannot read names only its own principal's memories: any other id answers
    as a random one (a proposal's success would tell that it exists)."""
    if target is None or not acts_on(caller, target, review=False):
        raise supersede_target_not_found()
    if target["status"] != "active":  # approval could never supersede it
        raise FailedPrecondition(
            f"supersedes: memory {target_id} is {target['status']}, not active; "
            "only active memories can be superseded"
        )
    return target


@dataclass(frozen=True)
class ReviewLimits:
    max_candidate_ttl: timedelta = check.MAX_CANDIDATE_TTL
    proposals_per_hour: int = 100


class Review:
    """Carries out ReviewService RPCs, and the candidate path of SaveMemory."""

    def __init__(self, memories: Memories, limits: ReviewLimits | None = None) -> None:
        self.memories = memories
        self.limits = limits or ReviewLimits()
        memories.review = self

    async def save_as_candidate(
        self,
        conn: asyncpg.Connection,
        caller: Caller,
        new: sql.NewMemory,
        supersedes: list[uuid.UUID],
        assertions: graph.Assertions = graph.NOTHING,
    ) -> memory_pb2.SaveMemoryResponse:
        """SaveMemory in a review-required namespace: store a candidate and say so."""
        candidate = replace(new, proposal_reason=REVIEW_REQUIRED_REASON)
        row, created = await self.propose_in_tx(
            conn, caller, candidate, supersedes, None, assertions
        )
        outcome = (
            memory_pb2.SAVE_OUTCOME_PROPOSED if created else memory_pb2.SAVE_OUTCOME_DEDUPLICATED
        )
        found = []
        if created:
            found = await self.memories.conflicts_of(
                conn, caller, row, new.embedding, new.embedding_model, proposal=True
            )
        return memory_pb2.SaveMemoryResponse(
            memory=convert.memory(row), outcome=outcome, conflicts=found
        )

    async def propose_in_tx(
        self,
        conn: asyncpg.Connection,
        caller: Caller,
        new: sql.NewMemory,
        supersedes: list[uuid.UUID],
        review_within: timedelta | None,
        assertions: graph.Assertions = graph.NOTHING,
        *,
        automatic: bool = False,
    ) -> tuple[asyncpg.Record, bool]:
        """Store ``new`` as a candidate; (row, created). Checks tombstones and limits.

        Its graph assertions are stored pending: they join the graph only on approval. An
        ``automatic`` candidate (graph extraction) may fill only half of the namespace's
        pending-candidate room, so extraction never locks people and agents out of it."""
        if review_within is not None and review_within > self.limits.max_candidate_ttl:
            # Checked first: a duplicate of a pending proposal answered OK to a window
            # that a new proposal is refused.
            raise InvalidArgument(
                "review_within", f"at most {self.limits.max_candidate_ttl.days} days"
            )
        vis = self.memories.visibility(caller)
        new = await self.proposal_place(conn, vis, caller, new, supersedes)
        await sql.lock_value(conn, caller.tenant_id, new)
        await self.memories.refuse_tombstoned(
            conn, vis, "memory.content", new.namespace, new.user_id, new.session_id,
            new.fingerprint,
        )  # fmt: skip
        targets = []
        for target_id in supersedes:  # checked now, superseded only on approval
            locked = await sql.lock_current(conn, vis, target_id)
            targets.append(proposal_target(caller, target_id, locked))
        new = replace(placement.successor(caller, new, targets), supersedes=supersedes)
        # A response never carries a row the caller could not read: without
        # memories:read, only the caller's own pending proposal counts as a duplicate.
        existing = await review_sql.pending_duplicate(
            conn, vis, new,
            own_candidates_of=None if caller.has(Permission.READ.value) else caller.principal,
        )  # fmt: skip
        if existing is not None:
            return existing, False
        policy = await review_sql.namespace_policy(conn, new.namespace)
        ttl = policy["candidate_ttl"] if policy else DEFAULT_CANDIDATE_TTL
        # A namespace policy stored before brain-admin bounded it (or under a larger
        # --max-candidate-ttl-days) is capped, never blamed on a field the caller left unset.
        ttl = min(ttl, self.limits.max_candidate_ttl)
        if review_within is not None:
            ttl = review_within
        if ttl > self.limits.max_candidate_ttl:
            raise InvalidArgument(
                "review_within", f"at most {self.limits.max_candidate_ttl.days} days"
            )
        max_pending = policy["max_pending"] if policy else 1000
        if automatic:
            max_pending //= 2
        # The cap counts other proposers' candidates too, which the caller cannot see: like a
        # quota (`quotas.exceeds`), those count rounded up to 1/32 of the cap, so proposing
        # until refused does not count them exactly.
        pending = await review_sql.pending_in_namespace(conn, caller.tenant_id, new.namespace)
        seen = await review_sql.visible_pending_in_namespace(
            conn, quotas.key_wide(vis, new.namespace), new.namespace
        )
        if quotas.exceeds(max_pending, pending, seen, 1):
            raise ResourceExhausted(
                f"namespace {new.namespace} has no room for more candidates awaiting review "
                f"(at most {max_pending}); review some before proposing more"
            )
        hour_ago = datetime.now(UTC) - timedelta(hours=1)
        recent = await review_sql.proposals_since(conn, caller.key.key_id, hour_ago)
        if recent >= self.limits.proposals_per_hour:
            raise ResourceExhausted(
                f"this key made {recent} proposals in the last hour; the limit is "
                f"{self.limits.proposals_per_hour}"
            )
        await quotas.reserve_memories(conn, vis, adding=1)
        at = await sql.clock(conn)
        candidate = replace(
            new,
            status="candidate",
            change="propose",
            supersedes=list(supersedes),
            candidate_expires_at=at + ttl,
        )
        memory_id = cursors.uuid7()
        row = await sql.insert_memory(conn, caller.tenant_id, candidate, memory_id, at)
        await graph.assert_graph(
            conn, vis, caller.tenant_id, memory_id, assertions, at, pending=True
        )
        return row, True

    async def proposal_place(
        self,
        conn: asyncpg.Connection,
        vis: Visibility,
        caller: Caller,
        new: sql.NewMemory,
        supersedes: list[uuid.UUID],
    ) -> sql.NewMemory:
        """A proposal that supersedes is placed where what it supersedes is: in the
        narrowest bucket that every reader of each target sees. A key confined to a user
        proposes a change to a team-shared memory this way (it cannot name the team's
        bucket), and on approval the team reads the new value."""
        if not supersedes:
            return new
        places = await sql.current_places(conn, vis, supersedes)
        for target_id in supersedes:
            proposal_target(caller, target_id, places.get(target_id))
        found = places.values()
        return replace(
            new,
            user_id=new.user_id if all(t["user_id"] == new.user_id for t in found) else "",
            session_id=(
                new.session_id if all(t["session_id"] == new.session_id for t in found) else ""
            ),
        )

    async def propose_extracted(
        self, caller: Caller, memory_id: uuid.UUID, content: str, draft: GraphDraft, model: str
    ) -> None:
        """A candidate that supersedes ``memory_id`` with the same content and the graph an
        extractor found in it: a reviewer decides whether it joins the graph. Nothing when
        the memory changed meanwhile or nothing valid was found."""
        m = self.memories
        embedding, embedding_model = await m.embed_content(content)
        vis = m.visibility(caller)
        async with m.tx(caller) as conn:
            current = await sql.lock_current(conn, vis, memory_id)
            if current is None or current["status"] != "active" or current["content"] != content:
                return
            assertions = graph.parse_draft(
                "graph", draft, current["valid_from"], current["valid_to"]
            )
            if not assertions:
                return
            new = sql.NewMemory(
                namespace=current["namespace"],
                user_id=current["user_id"],
                session_id=current["session_id"],
                content=content,
                fingerprint=bytes(current["fingerprint"]),
                kind=current["kind"],
                tags=list(current["tags"]),
                metadata=dict(current["metadata"]),
                labels=list(current["labels"]),
                status="candidate",
                confidence=current["confidence"],
                importance=current["importance"],
                valid_from=current["valid_from"],
                valid_to=current["valid_to"],
                expires_at=current["expires_at"],
                created_by=caller.principal,
                changed_by_key=caller.key.key_id,
                change="propose",
                embedding=embedding,
                embedding_model=embedding_model,
                proposal_reason=f"entities and relations extracted by {model}; approve to "
                "attach them to the memory it supersedes",
            )
            await self.propose_in_tx(
                conn, caller, new, [memory_id], None, assertions, automatic=True
            )

    async def review_required(
        self, conn: asyncpg.Connection, caller: Caller, namespace: str
    ) -> bool:
        """Whether a direct save by this caller must become a candidate."""
        if caller.has(Permission.REVIEW.value):
            return False
        policy = await review_sql.namespace_policy(conn, namespace)
        return bool(policy and policy["review_required"])

    async def propose(
        self, caller: Caller, req: review_pb2.ProposeMemoryRequest, timeout_ms: int | None = None
    ) -> review_pb2.ProposeMemoryResponse:
        m = self.memories
        new = m.new_memory(
            caller, req.memory, status="candidate", change="propose",
            successor=bool(req.supersedes),
        )  # fmt: skip
        assertions = graph.parse_draft("graph", req.graph, new.valid_from, new.valid_to)
        new.embedding, new.embedding_model = await m.embed_content(new.content)
        reason = check.text("reason", req.reason, limit=1000).strip()
        if not reason:
            raise InvalidArgument("reason", "is required: say why this should be remembered")
        new = replace(new, proposal_reason=reason)
        supersedes = m.supersede_ids(req.supersedes)
        review_within = None
        if req.HasField("review_within"):
            review_within = req.review_within.ToTimedelta()
            if review_within < timedelta(seconds=1):  # ToTimedelta drops what is below 1 µs
                raise InvalidArgument("review_within", "must be at least one second")
        idem = check.text("idempotency_key", req.idempotency_key, limit=128)
        async with m.tx(caller, timeout_ms=timeout_ms) as conn:
            replayed = await m.replay(conn, caller, idem, req)
            if replayed is not None:
                return review_pb2.ProposeMemoryResponse(candidate=replayed)
            row, created = await self.propose_in_tx(
                conn, caller, new, supersedes, review_within, assertions
            )
            found = []
            if created:  # named to the proposer only: it replaces them by naming them
                found = await m.conflicts_of(
                    conn, caller, row, new.embedding, new.embedding_model, proposal=True
                )
            response = review_pb2.ProposeMemoryResponse(
                candidate=convert.memory(row), conflicts=found
            )
            await m.remember(conn, caller, idem, response.candidate.id)
        return response

    async def list_candidates(
        self, caller: Caller, req: review_pb2.ListCandidatesRequest, timeout_ms: int | None = None
    ) -> review_pb2.ListCandidatesResponse:
        m = self.memories
        size = m.page_size("page_size", req.page_size, DEFAULT_PAGE_SIZE)
        proposed_by = check.text("proposed_by", req.proposed_by)
        if not caller.has(Permission.REVIEW.value):
            # Without review rights a key sees its own proposals only.
            if proposed_by and proposed_by != caller.principal:
                raise PermissionDenied(
                    "proposed_by: without memories:review a key lists only its own proposals"
                )
            proposed_by = caller.principal
        after = None
        if req.page_token:
            after = cursors.get_uuid(
                "page_token",
                m.tokens.decode(caller, "page_token", req.page_token, kind=cursors.Kind.CANDIDATES),
                "k",
            )
        async with m.tx(caller, timeout_ms=timeout_ms, readonly=True) as conn:
            rows = await review_sql.candidates_page(
                conn, m.visibility(caller), proposed_by, after, size + 1
            )
        token = (
            m.tokens.encode(
                caller, {"k": str(rows[size - 1]["memory_id"])}, kind=cursors.Kind.CANDIDATES
            )
            if len(rows) > size
            else ""
        )
        return review_pb2.ListCandidatesResponse(
            candidates=[convert.memory(r) for r in rows[:size]], next_page_token=token
        )

    async def review(
        self, caller: Caller, req: review_pb2.ReviewCandidateRequest, timeout_ms: int | None = None
    ) -> review_pb2.ReviewCandidateResponse:
        m = self.memories
        memory_id = check.memory_id("id", req.id)
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
            current = await sql.lock_current(conn, vis, memory_id)
            if (
                current is None
                or not acts_on(caller, current, review=True)
                or await hidden_from_reviewer(conn, vis, current)
            ):
                raise memory_not_found()
            if current["status"] != "candidate":
                raise FailedPrecondition(f"memory {req.id} is {current['status']}, not a candidate")
            if current["created_by"] == caller.principal:
                raise PermissionDenied(
                    "a candidate cannot be reviewed by the principal that proposed it; "
                    "ask another reviewer"
                )
            at = await sql.clock(conn)
            if (
                current["candidate_expires_at"] is not None
                and current["candidate_expires_at"] <= at
            ):
                raise FailedPrecondition(
                    f"candidate {req.id} expired at {current['candidate_expires_at'].isoformat()} "
                    "and can no longer be reviewed"
                )
            reviewed = {
                "reviewed_by": caller.principal,
                "reviewed_at": at,
                "review_reason": reason,
                "changed_by": caller.principal,
                "changed_by_key": caller.key.key_id,
            }
            if req.decision == review_pb2.REVIEW_DECISION_REJECT:
                await erasure.add_tombstone(
                    conn, current["tenant_id"], current, bytes(current["fingerprint"]), "reject",
                    caller.principal,
                )  # fmt: skip
                row = await sql.new_version(
                    conn,
                    current,
                    at,
                    {**reviewed, "status": "rejected", "change": "reject"},
                    shown_to=vis,
                )
                return review_pb2.ReviewCandidateResponse(
                    memory=convert.shown(row, caller.has(Permission.READ.value))
                )
            # Only tombstones the reviewer could see bind (and are lifted by) the approval.
            tombstones = await erasure.live_tombstones(
                conn, vis, current["namespace"], current["user_id"], current["session_id"],
                bytes(current["fingerprint"]),
            )  # fmt: skip
            if tombstones:
                if not req.readmit_tombstoned:
                    raise FailedPrecondition(
                        f"this value is held by tombstone {tombstones[0]} in the bucket; set "
                        "readmit_tombstoned to re-admit it explicitly"
                    )
                for tombstone in tombstones:
                    await review_sql.readmit_tombstone(conn, tombstone, caller.principal)
            # Approval is the review itself: the reviewer's visibility, not write scope.
            targets = await m.lock_targets(conn, vis, sorted(current["supersedes"]), writer=None)
            for target in targets:
                if not reaches_readers(current, target):
                    raise FailedPrecondition(
                        f"this candidate no longer reaches every reader of memory "
                        f"{target['memory_id']}, which it supersedes (its labels changed "
                        "since the proposal, or the proposal predates this rule); reject it "
                        "and propose again"
                    )
            # Transaction time is read again now the targets are locked: a target changed
            # while this waited has a version recorded after the first reading.
            at = await sql.clock(conn)
            reviewed = {**reviewed, "reviewed_at": at}
            row = await sql.new_version(
                conn,
                current,
                at,
                {**reviewed, "status": "active", "change": "approve"},
                shown_to=vis,
            )
            await m.mark_superseded(conn, caller, targets, current["memory_id"], at)
            await graph.approve(conn, current["tenant_id"], current["memory_id"], at)
            # Now ACTIVE: compared with what the reviewer sees, like a save.
            vector, model = await conflicts_sql.embedding_of(
                conn, current["tenant_id"], current["memory_id"]
            )
            found = await m.conflicts_of(conn, caller, row, vector, model)
        m.judge_later(caller, found)
        return review_pb2.ReviewCandidateResponse(
            memory=convert.shown(row, caller.has(Permission.READ.value)), conflicts=found
        )

    async def withdraw(
        self,
        caller: Caller,
        req: review_pb2.WithdrawCandidateRequest,
        timeout_ms: int | None = None,
    ) -> review_pb2.WithdrawCandidateResponse:
        m = self.memories
        memory_id = check.memory_id("id", req.id)
        reason = check.text("reason", req.reason, limit=1000)
        vis = m.visibility(caller)
        async with m.tx(caller, timeout_ms=timeout_ms) as conn:
            current = await sql.lock_current(conn, vis, memory_id)
            if current is None or not acts_on(caller, current, review=False):
                raise memory_not_found()
            if current["status"] != "candidate":
                raise FailedPrecondition(f"memory {req.id} is {current['status']}, not a candidate")
            if current["created_by"] != caller.principal:
                raise PermissionDenied(
                    "only the principal that proposed a candidate can withdraw it"
                )
            at = await sql.clock(conn)
            row = await sql.new_version(
                conn,
                current,
                at,
                {
                    "status": "withdrawn",
                    "change": "withdraw",
                    "review_reason": reason or None,
                    "changed_by": caller.principal,
                    "changed_by_key": caller.key.key_id,
                },
                shown_to=vis,
            )
        return review_pb2.WithdrawCandidateResponse(memory=convert.memory(row))
