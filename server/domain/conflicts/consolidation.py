"""Consolidation of restatements, and what forgetting does to derived memories (issue 30).

``ConsolidateMemories`` clusters the restatements (`detectors`, rule RESTATEMENT: the same
values and a high word or shingle overlap, or near-identical embeddings) among the ACTIVE
memories of one *cell* — one namespace, user, session and label set — and proposes one
consolidated memory per cluster, as a candidate whose ``supersedes`` are its sources.
A cluster never spans cells: a memory visible only where all of its sources are, which
also reaches every reader of each source, is possible only when they share one cell.
Without a model the consolidated text is the most complete source (the most distinct
words and values), then the most recent. Approval is ordinary review by another
principal: it supersedes the sources.

Forgetting is erasure, and erasure follows the text wherever it went:

- forgetting any source erases the consolidated memory's text in every version (it is
  withdrawn when still a candidate, retracted when approved) and reopens its remaining
  sources for review;
- forgetting a memory that superseded others reopens each of them as a candidate for
  review, never silently as ACTIVE (`brain_reopen_superseded`, migration 0037).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import numpy as np

from brain.server.domain import cursors, graph
from brain.server.domain.conflicts.detectors import (
    RESTATED,
    Rule,
    calibrated_cosine,
    compare,
    statement,
)
from brain.server.storage import conflicts as conflicts_sql
from brain.server.storage import erasure, setlocal
from brain.server.storage import memories as memory_sql
from brain.server.storage.visibility import Params, Visibility, visibility_predicate

CONSOLIDATE = "consolidate"
# Reopened and consolidated memories stay reviewable as long as a proposal does by default.
REOPEN_TTL = timedelta(days=7)
# At most this many memories of a namespace are clustered in one request.
MAX_SCANNED = 2000
# A word held by more memories of a cell than this is too common to pair them by.
COMMON_WORD = 50


@dataclass(frozen=True)
class Cluster:
    sources: list[asyncpg.Record]  # oldest first
    chosen: asyncpg.Record
    min_overlap: float


def _cell(row: Any) -> tuple[str, str, str, tuple[str, ...]]:
    return (row["namespace"], row["user_id"], row["session_id"], tuple(sorted(row["labels"])))


def _cosine(a: Any, b: Any) -> float:
    """The cosine of two rows' stored vectors as the rules read it: 0 without two vectors
    of one model, or for a model whose cosines the rules were not tuned on
    (`detectors.calibrated_cosine`)."""
    va, vb, model = a["embedding"], b["embedding"], a["embedding_model"]
    if va is None or vb is None or model != b["embedding_model"]:
        return 0.0
    xa, xb = va.to_numpy(), vb.to_numpy()  # pgvector's Vector
    norms = float(np.linalg.norm(xa) * np.linalg.norm(xb))
    return calibrated_cosine(model, float(xa @ xb) / norms if norms else 0.0)


def _sharing_pairs(members: list[asyncpg.Record]) -> list[tuple[int, int]]:
    """The pairs of a cell that share a content word (every rule needs one), found through
    an index of words, so a cell of thousands of memories is not compared pair by pair.
    A word in more than ``COMMON_WORD`` memories of the cell pairs nothing by itself."""
    holders: dict[str, list[int]] = {}
    for i, row in enumerate(members):
        for word in statement(row["content"]).words:
            holders.setdefault(word, []).append(i)
    pairs: set[tuple[int, int]] = set()
    for held in holders.values():
        if len(held) <= COMMON_WORD:
            pairs.update((a, b) for n, a in enumerate(held) for b in held[n + 1 :])
    return sorted(pairs)


def _completeness(row: Any) -> tuple[int, Any, Any]:
    said = statement(row["content"])
    return (len(said.words | said.values), row["valid_from"], row["recorded_at"])


def clusters(rows: list[asyncpg.Record], min_overlap: float = RESTATED) -> list[Cluster]:
    """Restatement clusters (two or more memories) within each cell, largest first."""
    parent = {r["memory_id"]: r["memory_id"] for r in rows}
    worst: dict[tuple[uuid.UUID, uuid.UUID], float] = {}

    def root(x: uuid.UUID) -> uuid.UUID:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    by_cell: dict[tuple[str, str, str, tuple[str, ...]], list[asyncpg.Record]] = {}
    for r in rows:
        by_cell.setdefault(_cell(r), []).append(r)
    for members in by_cell.values():
        for i, j in _sharing_pairs(members):
            a, b = members[i], members[j]
            cosine = _cosine(a, b)
            found = compare(a["content"], b["content"], cosine)
            if found is None or found.rule != Rule.RESTATEMENT:
                continue
            if found.overlap < min_overlap and cosine < 0.92:
                continue
            ra, rb = root(a["memory_id"]), root(b["memory_id"])
            if ra != rb:
                parent[rb] = ra
            key = (min(a["memory_id"], b["memory_id"]), max(a["memory_id"], b["memory_id"]))
            worst[key] = found.overlap
    groups: dict[uuid.UUID, list[asyncpg.Record]] = {}
    for r in rows:
        groups.setdefault(root(r["memory_id"]), []).append(r)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        ids = {m["memory_id"] for m in members}
        overlaps = [v for (a, b), v in worst.items() if a in ids and b in ids]
        members.sort(key=lambda m: (m["valid_from"], m["recorded_at"], m["memory_id"]))
        chosen = max(members, key=_completeness)
        out.append(Cluster(members, chosen, min(overlaps) if overlaps else 0.0))
    out.sort(key=lambda c: (-len(c.sources), c.sources[0]["memory_id"]))
    return out


async def active_rows(
    conn: asyncpg.Connection, v: Visibility, namespace: str
) -> list[asyncpg.Record]:
    """ACTIVE memories of the namespace that ``v`` sees and that no pending consolidation
    already covers, oldest first (``v`` with ``app_filter`` off: all of its tenant's, for
    brain-admin, which reads as the owner)."""
    p = Params(namespace, v.tenant_id)
    return list(
        await conn.fetch(
            f"""SELECT {memory_sql.MEMORY_COLUMNS}, m.fingerprint, m.embedding,
                       m.embedding_model
                FROM memories m
                WHERE m.namespace = $1 AND m.tenant_id = $2::uuid AND m.retired_at IS NULL
                  AND m.status = 'active'
                  AND (m.expires_at IS NULL OR m.expires_at > now())
                  AND {visibility_predicate(v, p)}
                  AND NOT EXISTS (
                      SELECT 1 FROM memories c
                      WHERE c.tenant_id = m.tenant_id AND c.retired_at IS NULL
                        AND c.status = 'candidate' AND c.change = '{CONSOLIDATE}'
                        AND m.memory_id = ANY (c.supersedes))
                ORDER BY m.recorded_at, m.memory_id
                LIMIT {MAX_SCANNED}""",
            *p.values,
        )
    )


async def propose(
    conn: asyncpg.Connection,
    tenant_id: Any,
    cluster: Cluster,
    principal: str,
    key_id: str,
    reason: str,
) -> asyncpg.Record:
    """The consolidated candidate: the chosen source's text in the cluster's cell, proposed
    by ``principal`` (who therefore cannot approve it), superseding every source."""
    chosen, sources = cluster.chosen, cluster.sources
    at = await memory_sql.clock(conn)
    new = memory_sql.NewMemory(
        namespace=chosen["namespace"], user_id=chosen["user_id"],
        session_id=chosen["session_id"], content=chosen["content"],
        fingerprint=bytes(chosen["fingerprint"]), kind=chosen["kind"],
        tags=sorted({t for s in sources for t in s["tags"]}), metadata=dict(chosen["metadata"]),
        labels=list(chosen["labels"]), status="candidate",
        confidence=max(s["confidence"] for s in sources),
        importance=max(s["importance"] for s in sources),
        valid_from=chosen["valid_from"], valid_to=chosen["valid_to"],
        expires_at=chosen["expires_at"], created_by=principal, changed_by_key=key_id,
        change=CONSOLIDATE, supersedes=[s["memory_id"] for s in sources],
        embedding=chosen["embedding"], embedding_model=chosen["embedding_model"],
        proposal_reason=f"{reason}: {len(sources)} restatements, the text of "
        f"{chosen['memory_id']} (the most complete, then the most recent)",
        candidate_expires_at=at + REOPEN_TTL,
    )  # fmt: skip
    return await memory_sql.insert_memory(conn, tenant_id, new, cursors.uuid7(), at)


async def after_forget(
    conn: asyncpg.Connection, forgotten: asyncpg.Record, at: datetime, changes: dict[str, Any]
) -> None:
    """The rest of a forget: the memory's conflicts go, every memory consolidated from it
    is erased (and its other sources reopened), and what it superseded is reopened."""
    tenant_id, memory_id = forgotten["tenant_id"], forgotten["memory_id"]
    await conflicts_sql.erase(conn, tenant_id, memory_id)
    # Consolidated memories lie in their sources' cell, which the forgetting key sees;
    # a pending one is a proposal, so proposals are admitted for these statements.
    before = await conn.fetchval("SELECT COALESCE(current_setting('brain.may_review', true), '')")
    await setlocal.set_local(conn, {"brain.may_review": "on"})
    try:
        derived = await conn.fetch(
            """SELECT d.memory_id FROM memories d
               WHERE d.tenant_id = $1 AND d.retired_at IS NULL
                 AND d.status IN ('candidate', 'active', 'superseded')
                 AND $2 = ANY (d.supersedes)
                 AND EXISTS (SELECT 1 FROM memories f
                             WHERE f.tenant_id = d.tenant_id AND f.memory_id = d.memory_id
                               AND f.version = 1 AND f.change = $3)
               ORDER BY d.memory_id""",
            tenant_id, memory_id, CONSOLIDATE,
        )  # fmt: skip
        for d in derived:
            await memory_sql.lock_memory(conn, tenant_id, d["memory_id"])
            row = await conn.fetchrow(
                f"""SELECT {memory_sql.MEMORY_COLUMNS} FROM memories m
                    WHERE m.tenant_id = $1 AND m.memory_id = $2 AND m.retired_at IS NULL""",
                tenant_id,
                d["memory_id"],
            )
            if row is None or row["status"] not in ("candidate", "active", "superseded"):
                continue
            await erasure.erase_all_versions(conn, tenant_id, d["memory_id"])
            await graph.erase(conn, tenant_id, d["memory_id"])
            await conflicts_sql.erase(conn, tenant_id, d["memory_id"])
            status = "withdrawn" if row["status"] == "candidate" else "retracted"
            await memory_sql.new_version(
                conn, row, at,
                {**changes, "status": status,
                 "review_reason": "a memory it was consolidated from was forgotten"},
            )  # fmt: skip
            if status == "retracted":
                await reopen(conn, d["memory_id"], at, changes)
    finally:
        await setlocal.set_local(conn, {"brain.may_review": before})
    await reopen(conn, memory_id, at, changes)


async def reopen(
    conn: asyncpg.Connection, forgotten: uuid.UUID, at: datetime, changes: dict[str, Any]
) -> int:
    return await conflicts_sql.reopen_superseded(
        conn, forgotten, at, changes["changed_by"], changes["changed_by_key"], REOPEN_TTL
    )
