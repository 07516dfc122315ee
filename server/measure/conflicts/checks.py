"""The checks that follow the writes, in the same tenants (they change the data, so last).

- `marks`: each older memory of a pair with an OPEN conflict is searched for by its own
  text; its hit should carry the conflict ("this may be outdated").
- `consolidate`: ConsolidateMemories in each consolidation set's namespace; the clusters are
  recorded in the set's terms, and one pure cluster per set is then approved (every other
  set) or left pending, one of its sources forgotten (the chosen one every other time), and
  the consolidated text looked for everywhere a reader could find it (`erase`).
- `reopen`: a few detected supersedes are approved by a reviewer, then the newer memory is
  forgotten; the older one should come back as a candidate for review, never as ACTIVE.
"""

from __future__ import annotations

import grpc

from brain.server.measure.conflicts.model import ConsolidationSet, LabelledSet, Placement
from brain.server.measure.conflicts.runner import ALL_STATUSES, TIMEOUT, Runner, namespace, scope_of
from brain.server.measure.conflicts.trace import Cluster, Erasure, naming
from brain.v1 import common_pb2, memory_pb2, review_pb2

REOPEN_CASES = 12


async def marks(run: Runner, labelled: LabelledSet) -> None:
    for case in labelled.cases:
        pair = run.trace.pairs.get(case.id)
        if case.variant != "same" or case.expect == "none" or pair is None:
            continue
        older, newer = pair
        if not any(s.state == "OPEN" for s in naming(run.trace.seen, older, newer)):
            continue
        at = case.older_at
        found = await run.memory.SearchMemories(
            memory_pb2.SearchMemoriesRequest(
                scope=scope_of(case.id, at), query=case.older.text, limit=10, min_relevance=0
            ),
            metadata=run.md(at.tenant, at.writer), timeout=TIMEOUT,
        )  # fmt: skip
        hit = next((h for h in found.hits if h.memory.id == older), None)
        run.trace.marks[case.id] = hit is not None and any(
            c.older_id == older and c.newer_id == newer for c in hit.conflicts
        )


async def reopen(run: Runner, labelled: LabelledSet, limit: int = REOPEN_CASES) -> None:
    for case in labelled.cases:
        if len(run.trace.reopens) >= limit:
            return
        pair = run.trace.pairs.get(case.id)
        if (case.variant, case.expect, case.path) != ("same", "supersede", "save") or not pair:
            continue
        older, newer = pair
        found = [s for s in naming(run.trace.seen, older, newer) if s.state == "OPEN" and s.id]
        if not found:
            continue
        at, ns = case.older_at, namespace(case.id, case.older_at)
        resolved = await run.optional(
            "ResolveConflict",
            run.review.ResolveConflict(
                review_pb2.ResolveConflictRequest(
                    scope=common_pb2.Scope(namespace=ns), id=found[0].id,
                    decision=review_pb2.REVIEW_DECISION_APPROVE, reason="brain-eval conflicts",
                ),
                metadata=run.md(at.tenant, "reviewer"), timeout=TIMEOUT,
            ),
        )  # fmt: skip
        if resolved is None:
            return
        await run.memory.ForgetMemory(
            memory_pb2.ForgetMemoryRequest(
                scope=scope_of(case.id, case.newer_at), id=newer, reason="brain-eval conflicts"
            ),
            metadata=run.md(at.tenant, case.newer_at.writer), timeout=TIMEOUT,
        )  # fmt: skip
        after = await run.get(at.tenant, older, ns)
        run.trace.reopens[case.id] = (
            _status(resolved.older.status),
            _status(after.status) if after is not None else "NOT_FOUND",
        )


def _status(value: common_pb2.MemoryStatus.ValueType) -> str:
    return common_pb2.MemoryStatus.Name(value).removeprefix("MEMORY_STATUS_")


async def consolidate(run: Runner, labelled: LabelledSet) -> None:
    for index, s in enumerate(labelled.consolidation):
        ns = namespace(s.id, Placement())
        index_of = {
            memory_id: int(w.role.split(":")[1])
            for memory_id, w in run.trace.written.items()
            if w.owner == s.id
        }
        answered = await run.optional(
            "ConsolidateMemories",
            run.review.ConsolidateMemories(
                review_pb2.ConsolidateMemoriesRequest(
                    scope=common_pb2.Scope(namespace=ns), max_clusters=100,
                    reason="brain-eval conflicts",
                ),
                metadata=run.md("a", "reviewer"), timeout=TIMEOUT,
            ),
        )  # fmt: skip
        if answered is None:
            return
        run.trace.consolidated_sets.append(s.id)
        clusters = []
        for c in answered.consolidations:
            sources = tuple(index_of.get(i, -1) for i in c.source_ids)
            cells = {s.members[i].at.cell for i in sources if i >= 0}
            cand = c.candidate
            in_cell = len(cells) == 1 and -1 not in sources
            if in_cell and cand.id:
                at = s.members[sources[0]].at
                placed = (cand.scope.user_id, cand.scope.session_id, sorted(cand.labels))
                in_cell = cand.scope.namespace == ns and placed == (
                    at.user,
                    at.session,
                    sorted(at.labels),
                )
            chosen = index_of.get(c.chosen_id, -1)
            names = set(cand.supersedes) == set(c.source_ids)
            clusters.append(Cluster(s.id, sources, cand.id, cand.content, chosen, in_cell, names))
        run.trace.clusters += clusters
        pure = [c for c in clusters if c.candidate_id and c.in_cell and _one_group(s, c)]
        if pure:
            await erase(run, s, pure[0], approve=index % 2 == 0,
                        forget_chosen=(index // 2) % 2 == 0, index_of=index_of,
                        others=[k for k in clusters if k is not pure[0]])  # fmt: skip


def _one_group(s: ConsolidationSet, c: Cluster) -> bool:
    groups = {s.members[i].group for i in c.sources}
    return len(groups) == 1 and "" not in groups


async def erase(
    run: Runner, s: ConsolidationSet, c: Cluster, *, approve: bool, forget_chosen: bool,
    index_of: dict[str, int], others: list[Cluster],
) -> None:  # fmt: skip
    ns = namespace(s.id, Placement())
    md = run.md("a", "reviewer")
    id_of = {i: memory_id for memory_id, i in index_of.items()}
    if approve:
        await run.review.ReviewCandidate(
            review_pb2.ReviewCandidateRequest(
                scope=common_pb2.Scope(namespace=ns), id=c.candidate_id,
                decision=review_pb2.REVIEW_DECISION_APPROVE, reason="brain-eval conflicts",
            ),
            metadata=run.md("a", "reviewer2"), timeout=TIMEOUT,
        )  # fmt: skip
    forgot_chosen = forget_chosen and c.chosen in c.sources
    victim = c.chosen if forgot_chosen else next(i for i in c.sources if i != c.chosen)
    at = s.members[victim].at
    await run.memory.ForgetMemory(
        memory_pb2.ForgetMemoryRequest(
            scope=scope_of(s.id, at), id=id_of[victim], reason="brain-eval conflicts"
        ),
        metadata=run.md("a", at.writer), timeout=TIMEOUT,
    )  # fmt: skip
    # The text may live on only where it does not come from the forgotten source: members
    # written with the same words (the chosen one, copies in other cells) and the other
    # cells' consolidations of those copies.
    allowed = {
        id_of[i] for i, m in enumerate(s.members)
        if i != victim and i in id_of and m.text == c.text
    }  # fmt: skip
    allowed |= {k.candidate_id for k in others if victim not in k.sources}
    allowed -= {c.candidate_id}

    left: list[str] = []

    def clean(memory: common_pb2.Memory, where: str) -> bool:
        if memory.id == c.candidate_id:
            ok = not memory.content
        else:
            ok = memory.id in allowed or memory.content != c.text
        if not ok:
            role = "consolidated" if memory.id == c.candidate_id else f"memory {memory.id}"
            left.append(f"{where}: {role} v{memory.version} {_status(memory.status)}")
        return ok

    checks: dict[str, bool] = {}
    got = await run.get("a", c.candidate_id, ns)
    checks["get"] = got is None or not got.content
    try:
        history = await run.memory.GetMemoryHistory(
            memory_pb2.GetMemoryHistoryRequest(
                scope=common_pb2.Scope(namespace=ns), id=c.candidate_id
            ),
            metadata=md, timeout=TIMEOUT,
        )  # fmt: skip
        checks["history"] = all(not v.content for v in history.versions)
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.NOT_FOUND:
            raise
        checks["history"] = True  # nothing left to read
    found = await run.memory.SearchMemories(
        memory_pb2.SearchMemoriesRequest(
            scope=common_pb2.Scope(namespace=ns), query=c.text, limit=50, min_relevance=0,
            filter=common_pb2.MemoryFilter(statuses=ALL_STATUSES),
        ),
        metadata=md, timeout=TIMEOUT,
    )  # fmt: skip
    checks["search"] = all([clean(h.memory, "search") for h in found.hits])
    exported = run.memory.ExportMemories(
        memory_pb2.ExportMemoriesRequest(
            scope=common_pb2.Scope(namespace=ns), include_history=True,
            filter=common_pb2.MemoryFilter(statuses=ALL_STATUSES),
        ),
        metadata=md, timeout=TIMEOUT,
    )  # fmt: skip
    checks["export"] = all([clean(item.memory, "export") async for item in exported])
    remaining = [id_of[i] for i in c.sources if i != victim]
    statuses = [await run.get("a", r, ns) for r in remaining]
    if approve:
        checks["sources_reopened"] = all(
            m is not None and m.status == common_pb2.MEMORY_STATUS_CANDIDATE for m in statuses
        )
        listed = await run.review.ListCandidates(
            review_pb2.ListCandidatesRequest(
                scope=common_pb2.Scope(namespace=ns), page_size=100
            ),
            metadata=md, timeout=TIMEOUT,
        )  # fmt: skip
        pending = {m.id for m in listed.candidates}
        checks["sources_listed_for_review"] = all(r in pending for r in remaining)
    else:
        checks["sources_kept"] = all(
            m is not None and m.status == common_pb2.MEMORY_STATUS_ACTIVE for m in statuses
        )
    run.trace.erasures.append(Erasure(s.id, approve, forgot_chosen, checks, tuple(left)))
