"""The run: the labelled set written through the public gRPC API, the answers recorded.

Two fresh tenants (``a`` and ``b``), each with the writers of `model.KEYS` and two
reviewers (unconfined, every label, memories:review). Each case goes to a namespace of its
own: the fillers and the older memory first, then the newer one by its path (SaveMemory;
a placeholder saved and then UpdateMemory; or ProposeMemory and a reviewer's approval).
Every conflict in a response is recorded, and every id it names is read back with the
writer's own key: one it cannot read is a leak. Then every namespace of both tenants is
listed with an unconfined reviewer key (ListConflicts, every recorded state).

What follows changes the data and comes last (`checks`): the search mark on older hits,
consolidation and erasure, and forgetting a memory that superseded another.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import asyncpg
import grpc

from brain.authz import Confinement
from brain.server.measure.conflicts.model import (
    ALL_LABELS,
    KEYS,
    Case,
    LabelledSet,
    Placement,
    Statement,
)
from brain.server.measure.conflicts.trace import Seen, Trace, Where
from brain.server.storage import admin
from brain.v1 import (
    common_pb2,
    graph_pb2,
    memory_pb2,
    memory_pb2_grpc,
    review_pb2,
    review_pb2_grpc,
)

T = TypeVar("T")
TENANTS = ("a", "b")
WRITER_PERMISSIONS = frozenset(
    {"memories:read", "memories:write", "memories:propose", "memories:forget"}
)
REVIEWERS = ("reviewer", "reviewer2")
REVIEWER_PERMISSIONS = frozenset({"memories:read", "memories:review"})
LISTED_STATES = (
    common_pb2.CONFLICT_STATE_OPEN,
    common_pb2.CONFLICT_STATE_RESOLVED,
    common_pb2.CONFLICT_STATE_DISMISSED,
    common_pb2.CONFLICT_STATE_APPLIED,
)
ALL_STATUSES = [s for s in common_pb2.MemoryStatus.values() if s]
TIMEOUT = 60.0


@dataclass(frozen=True)
class Tenants:
    """The run's two tenants: ``names[t]`` is tenant ``t``'s name (``a``, ``b``), and
    ``keys[t][key]`` a full API key of it."""

    names: dict[str, str]
    keys: dict[str, dict[str, str]]


async def provision(owner_dsn: str, pepper: bytes) -> Tenants:
    """Two fresh tenants, with the writers of `KEYS` and the reviewers in each."""
    run = secrets.token_hex(4)
    names = {tenant: f"conflicts-eval-{run}-{tenant}" for tenant in TENANTS}
    keys: dict[str, dict[str, str]] = {}
    conn = await asyncpg.connect(owner_dsn)
    try:
        async with conn.transaction():
            for tenant, name in names.items():
                await admin.create_tenant(conn, name)
                keys[tenant] = {}
                specs: list[tuple[str, frozenset[str], Confinement, tuple[str, ...]]] = [
                    (k, WRITER_PERMISSIONS, Confinement(user_id=s.user, session_id=s.session),
                     s.labels)
                    for k, s in KEYS.items()
                ]  # fmt: skip
                specs += [(r, REVIEWER_PERMISSIONS, Confinement(), ALL_LABELS) for r in REVIEWERS]
                for key_name, permissions, confinement, labels in specs:
                    minted = await admin.mint_key(
                        conn, pepper, tenant=name, principal=key_name, permissions=permissions,
                        confinement=confinement, labels=frozenset(labels), expires_at=None,
                        description="brain-eval conflicts",
                    )  # fmt: skip
                    keys[tenant][key_name] = minted.key
    finally:
        await conn.close()
    return Tenants(names, keys)


def namespace(owner: str, at: Placement) -> str:
    """The namespace of a case or consolidation set (``cf-<id>``, or a sibling)."""
    return f"cf-{owner}" + (f"-{at.namespace}" if at.namespace else "")


def scope_of(owner: str, at: Placement) -> common_pb2.Scope:
    return common_pb2.Scope(namespace=namespace(owner, at), user_id=at.user, session_id=at.session)


def _timestamp(day: str) -> datetime:
    return datetime.fromisoformat(day).replace(tzinfo=UTC)


def draft(st: Statement, at: Placement) -> common_pb2.MemoryDraft:
    d = common_pb2.MemoryDraft(content=st.text, kind="fact", labels=list(at.labels))
    if st.valid_from:
        d.valid_from.FromDatetime(_timestamp(st.valid_from))
    if st.valid_to:
        d.valid_to.FromDatetime(_timestamp(st.valid_to))
    return d


def graph(st: Statement) -> graph_pb2.GraphDraft | None:
    if not st.facts:
        return None
    g = graph_pb2.GraphDraft()
    for f in st.facts:
        g.entities.add(name=f.subject, type=f.subject_type)
        g.entities.add(name=f.object, type=f.object_type)
        one = graph_pb2.CARDINALITY_ONE if f.single_valued else graph_pb2.CARDINALITY_MANY
        r = g.relations.add(subject=f.subject, predicate=f.predicate, object=f.object,
                            cardinality=one)  # fmt: skip
        if f.valid_from:
            r.valid_from.FromDatetime(_timestamp(f.valid_from))
        if f.valid_to:
            r.valid_to.FromDatetime(_timestamp(f.valid_to))
    return g


class NotWritten(Exception):
    """A save that did not create a new memory."""


class Runner:
    """One run over one server: the stubs, the keys, and the trace being filled."""

    def __init__(self, channel: grpc.aio.Channel, tenants: Tenants) -> None:
        self.memory = memory_pb2_grpc.MemoryServiceStub(channel)
        self.review = review_pb2_grpc.ReviewServiceStub(channel)
        self.keys = tenants.keys
        self.trace = Trace()
        # Responses' conflicts, with who wrote and in which scope: for the leak check.
        self.responses: list[tuple[Seen, str, common_pb2.Scope]] = []

    def md(self, tenant: str, key: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.keys[tenant][key]}"),)

    async def optional(self, rpc: str, call: Awaitable[T]) -> T | None:
        """``call``, or None when the server does not implement ``rpc`` (recorded)."""
        try:
            return await call
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            self.trace.unavailable.add(rpc)
            return None

    def responded(
        self, conflicts: Iterable[common_pb2.Conflict], source: str, tenant: str, key: str,
        scope: common_pb2.Scope,
    ) -> None:  # fmt: skip
        for c in conflicts:
            seen = Seen.of(c, source, tenant)
            self.trace.seen.append(seen)
            self.responses.append((seen, key, scope))

    def wrote(self, memory_id: str, owner: str, role: str, at: Placement) -> None:
        self.trace.written[memory_id] = Where(at.tenant, owner, role, at, namespace(owner, at))

    # -- writing -------------------------------------------------------------------------

    async def save(self, st: Statement, at: Placement, owner: str, role: str) -> str:
        scope = scope_of(owner, at)
        request = memory_pb2.SaveMemoryRequest(scope=scope, memory=draft(st, at), graph=graph(st))
        saved = await self.memory.SaveMemory(
            request, metadata=self.md(at.tenant, at.writer), timeout=TIMEOUT
        )
        if saved.outcome != memory_pb2.SAVE_OUTCOME_CREATED:
            # Another memory's id (deduplicated) would be scored as this one: the set must
            # not hold a statement its writer can already see in the same bucket.
            outcome = memory_pb2.SaveOutcome.Name(saved.outcome)
            raise NotWritten(f"{role} {st.text!r} was not created: {outcome}")
        self.wrote(saved.memory.id, owner, role, at)
        self.responded(saved.conflicts, "save", at.tenant, at.writer, scope)
        return str(saved.memory.id)

    async def update_into(self, st: Statement, at: Placement, owner: str) -> str:
        """A placeholder saved, then updated into ``st``: the conflict comes with the update."""
        placeholder = Statement(f"Scratch note {owner}: details to follow")
        memory_id = await self.save(placeholder, at, owner, "newer")
        paths = ["content"] + ["graph"] * bool(st.facts)
        paths += ["valid_from"] * bool(st.valid_from) + ["valid_to"] * bool(st.valid_to)
        request = memory_pb2.UpdateMemoryRequest(
            scope=scope_of(owner, at), id=memory_id, patch=draft(st, at), graph=graph(st)
        )
        request.update_mask.paths.extend(paths)
        updated = await self.memory.UpdateMemory(
            request, metadata=self.md(at.tenant, at.writer), timeout=TIMEOUT
        )
        self.responded(updated.conflicts, "update", at.tenant, at.writer, request.scope)
        return memory_id

    async def approve_into(self, st: Statement, at: Placement, owner: str) -> str:
        """Proposed by the writer, approved by a reviewer: the approval reports the conflict."""
        scope = scope_of(owner, at)
        proposed = await self.review.ProposeMemory(
            review_pb2.ProposeMemoryRequest(
                scope=scope, memory=draft(st, at), graph=graph(st), reason="brain-eval conflicts"
            ),
            metadata=self.md(at.tenant, at.writer), timeout=TIMEOUT,
        )  # fmt: skip
        memory_id = str(proposed.candidate.id)
        self.wrote(memory_id, owner, "newer", at)
        self.responded(proposed.conflicts, "propose", at.tenant, at.writer, scope)
        approved = await self.review.ReviewCandidate(
            review_pb2.ReviewCandidateRequest(
                scope=scope, id=memory_id, decision=review_pb2.REVIEW_DECISION_APPROVE,
                reason="brain-eval conflicts",
            ),
            metadata=self.md(at.tenant, "reviewer"), timeout=TIMEOUT,
        )  # fmt: skip
        self.responded(approved.conflicts, "approve", at.tenant, "reviewer", scope)
        return memory_id

    async def write_case(self, case: Case) -> None:
        try:
            for text in case.fillers:
                await self.save(Statement(text), case.older_at, case.id, "filler")
            older = await self.save(case.older, case.older_at, case.id, "older")
            if case.path == "update":
                newer = await self.update_into(case.newer, case.newer_at, case.id)
            elif case.path == "approve":
                newer = await self.approve_into(case.newer, case.newer_at, case.id)
            else:
                newer = await self.save(case.newer, case.newer_at, case.id, "newer")
            self.trace.pairs[case.id] = (older, newer)
        except grpc.aio.AioRpcError as exc:
            self.trace.errors.append(f"case {case.id}: {exc.code().name}: {exc.details()}")
        except NotWritten as exc:
            self.trace.errors.append(f"case {case.id}: {exc}")

    async def write_all(
        self, labelled: LabelledSet, concurrency: int, progress: Callable[[str, int, int], None]
    ) -> None:
        gate = asyncio.Semaphore(concurrency)
        done = 0
        total = len(labelled.cases) + len(labelled.consolidation)

        async def one(job: Awaitable[None]) -> None:
            nonlocal done
            async with gate:
                await job
            done += 1
            progress("conflicts: writing", done, total)

        jobs: list[Awaitable[None]] = [self.write_case(c) for c in labelled.cases]
        for s in labelled.consolidation:
            jobs.append(self.write_members(s.id, [(m.text, m.at) for m in s.members]))
        await asyncio.gather(*(one(j) for j in jobs))

    async def write_members(self, set_id: str, members: list[tuple[str, Placement]]) -> None:
        for i, (text, at) in enumerate(members):
            try:
                await self.save(Statement(text), at, set_id, f"member:{i}")
            except grpc.aio.AioRpcError as exc:
                self.trace.errors.append(f"set {set_id}: {exc.code().name}: {exc.details()}")
            except NotWritten as exc:
                self.trace.errors.append(f"set {set_id}: {exc}")

    # -- reading back --------------------------------------------------------------------

    async def list_all(self) -> None:
        """Every recorded conflict in every namespace the run wrote, per tenant, as an
        unconfined reviewer sees them."""
        spaces = sorted({(w.tenant, w.namespace) for w in self.trace.written.values()})
        for tenant, ns in spaces:
            token = ""
            while True:
                listed = await self.optional(
                    "ListConflicts",
                    self.review.ListConflicts(
                        review_pb2.ListConflictsRequest(
                            scope=common_pb2.Scope(namespace=ns), states=LISTED_STATES,
                            page_size=100, page_token=token,
                        ),
                        metadata=self.md(tenant, "reviewer"), timeout=TIMEOUT,
                    ),
                )  # fmt: skip
                if listed is None:
                    return
                self.trace.seen += [Seen.of(c, "list", tenant) for c in listed.conflicts]
                token = listed.next_page_token
                if not token:
                    break

    async def check_leaks(self) -> None:
        """Each id a response named, read back with the writer's key in the write's scope."""
        checked: dict[tuple[str, str, str, str], bool] = {}
        for seen, key, scope in self.responses:
            for memory_id in (seen.newer_id, seen.older_id):
                at = (seen.tenant, key, scope.SerializeToString().hex(), memory_id)
                if at not in checked:
                    checked[at] = await self.readable(seen.tenant, key, scope, memory_id)
                if not checked[at]:
                    self.trace.leaks.append(
                        f"{seen.source} by {key} in {scope.namespace} named {memory_id}"
                    )

    async def readable(
        self, tenant: str, key: str, scope: common_pb2.Scope, memory_id: str
    ) -> bool:
        if memory_id not in self.trace.written:
            return False
        try:
            await self.memory.GetMemory(
                memory_pb2.GetMemoryRequest(scope=scope, id=memory_id),
                metadata=self.md(tenant, key), timeout=TIMEOUT,
            )  # fmt: skip
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return False
            raise
        return True

    async def get(self, tenant: str, memory_id: str, ns: str) -> Any:
        """The memory as a reviewer reads it, or None when it answers NOT_FOUND."""
        try:
            got = await self.memory.GetMemory(
                memory_pb2.GetMemoryRequest(scope=common_pb2.Scope(namespace=ns), id=memory_id),
                metadata=self.md(tenant, "reviewer"), timeout=TIMEOUT,
            )  # fmt: skip
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return got.memory
