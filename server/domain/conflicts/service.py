"""Conflicts between memories (issue 30): found at write time, decided by review.

Every write that makes a memory ACTIVE (save, update of its content, approval of a
candidate) and every proposal is compared with the ACTIVE memories of its namespace that
the writer can see (`detectors`; single-valued graph relations for slots). What is found
never changes a memory by itself:

- it is recorded OPEN for review when the newer memory reaches every reader of the older
  one (the graph's fact-closing rule: same namespace, the newer shared or in the older's
  user and session, holding every label of the older, expiring no earlier) — a reviewer
  then supersedes the older by the newer, or dismisses the pair for good;
- otherwise, or for a proposal, it is only NOTED in the response, so the agent learns at
  once (a proposal names the older memory in ``supersedes`` to replace it);
- a namespace with policy ``supersede_own`` lets the writer's own supersede happen at once
  (APPLIED) when it could have superseded by hand: write power over the older memory, and
  the same user, session and labels — never across them; ``off`` turns detection off.

The response names only memories the writer sees (the comparison reads through its
visibility), and a conflict row is visible only where both of its memories are.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from brain.authz import Caller
from brain.server.domain import convert
from brain.server.domain.conflicts.detectors import (
    Finding,
    Reading,
    Rule,
    calibrated_cosine,
    compare_statements,
    statement,
)
from brain.server.storage import conflicts as sql
from brain.server.storage import memories as memory_sql
from brain.server.storage import visibility
from brain.v1 import common_pb2

RULES = {
    "value_update": common_pb2.CONFLICT_RULE_VALUE_UPDATE,
    "correction": common_pb2.CONFLICT_RULE_CORRECTION,
    "slot": common_pb2.CONFLICT_RULE_SLOT,
    "restatement": common_pb2.CONFLICT_RULE_RESTATEMENT,
}
STATES = {
    "open": common_pb2.CONFLICT_STATE_OPEN,
    "resolved": common_pb2.CONFLICT_STATE_RESOLVED,
    "dismissed": common_pb2.CONFLICT_STATE_DISMISSED,
    "applied": common_pb2.CONFLICT_STATE_APPLIED,
}
PROTO_TO_STATE = {v: k for k, v in STATES.items()}


def conflict(row: Any) -> common_pb2.Conflict:
    """A recorded conflict as the API shows it (the caller sees both memories)."""
    out = common_pb2.Conflict(
        id=str(row["conflict_id"]),
        newer_id=str(row["newer_id"]),
        older_id=str(row["older_id"]),
        rule=RULES[row["rule"]],
        state=STATES[row["state"]],
        overlap=float(row["overlap"]),
        semantic_similarity=float(row["semantic"]),
        detail=row["detail"],
        judge=row["judge"],
        detected_by=row["detected_by"],
        resolved_by=row["resolved_by"] or "",
        resolve_reason=row["resolve_reason"] or "",
        detected_at=convert.ts(row["detected_at"]),
        resolved_at=convert.ts(row["resolved_at"]),
    )
    return out


def reaches_readers(newer: Any, older: Any) -> bool:
    """Whether every caller who can see ``older`` can also see ``newer``, for as long
    (`brain.server.storage.visibility.reaches_readers`, and an expiry no earlier)."""
    return visibility.reaches_readers(newer, older) and (
        newer["expires_at"] is None
        or (older["expires_at"] is not None and older["expires_at"] <= newer["expires_at"])
    )


def same_cell(a: Any, b: Any) -> bool:
    """Same user, session and labels: a supersede between them crosses no wall."""
    return (
        a["namespace"] == b["namespace"]
        and a["user_id"] == b["user_id"]
        and a["session_id"] == b["session_id"]
        and set(a["labels"]) == set(b["labels"])
    )


def _newer_first(a: Any, b: Any) -> bool:
    """Whether ``a`` is the newer statement: later valid time, then later belief."""
    return (a["valid_from"], a["recorded_at"]) > (b["valid_from"], b["recorded_at"])


class Detection:
    """One write's comparison, inside its transaction."""

    def __init__(self, supersede: Any) -> None:
        # MemoryWrites.mark_superseded (a callable, so this module never imports memories).
        self.supersede = supersede

    async def run(
        self,
        conn: asyncpg.Connection,
        caller: Caller,
        vis: Any,
        written: asyncpg.Record,
        vector: Sequence[float] | None,
        model: str | None,
        *,
        proposal: bool,
        slots: bool,
    ) -> list[common_pb2.Conflict]:
        """Compare ``written`` with what the writer sees; record, apply or note each find.
        ``slots``: the write asserted single-valued relations (so the graph is read too)."""
        policy = await sql.namespace_policy(conn, written["namespace"])
        if policy == "off":
            return []
        found: dict[uuid.UUID, tuple[asyncpg.Record, Finding]] = {}
        said = None  # the written text, read once for all of its peers
        memo: Reading = {}  # each token read once for this write
        for peer in await sql.peers(
            conn, vis, written["namespace"], written["memory_id"], written["content"],
            vector, model,
        ):  # fmt: skip
            said = said or statement(written["content"], memo)
            other = statement(peer["content"], memo)
            first, then = (other, said) if _newer_first(written, peer) else (said, other)
            finding = compare_statements(
                first, then, calibrated_cosine(model, float(peer["cosine"]))
            )
            if finding is not None:
                found[peer["memory_id"]] = (peer, finding)
        if slots and not proposal:
            # The graph's word is the strongest: it names the attribute and both values.
            for peer in await sql.slot_peers(conn, vis, written["memory_id"]):
                detail = (
                    f"{peer['subject']} {peer['predicate']}: {peer['old_object']} -> "
                    f"{peer['new_object']}"
                )
                found[peer["memory_id"]] = (peer, Finding(Rule.SLOT, 0.0, detail))
        if not found:
            return []
        recorded = await sql.recorded_pairs(conn, written["tenant_id"], written["memory_id"])
        at = await memory_sql.clock(conn)
        out = []
        for peer_id in sorted(found):
            peer, finding = found[peer_id]
            written_newer = _newer_first(written, peer) or finding.rule == Rule.SLOT
            newer, older = (written, peer) if written_newer else (peer, written)
            noted = common_pb2.Conflict(
                newer_id=str(newer["memory_id"]), older_id=str(older["memory_id"]),
                rule=RULES[finding.rule.value], state=common_pb2.CONFLICT_STATE_NOTED,
                overlap=finding.overlap, semantic_similarity=float(peer["cosine"]),
                detail=finding.detail, detected_by=caller.principal,
            )  # fmt: skip
            noted.detected_at.FromDatetime(at)
            pair = (older["memory_id"], newer["memory_id"])
            if proposal or not reaches_readers(newer, older):
                out.append(noted)
                continue
            if pair in recorded or pair[::-1] in recorded:  # decided before: never proposed anew
                row = await sql.existing(conn, written["tenant_id"], *pair)
                if row is not None:
                    out.append(conflict(row))
                continue
            state = "open"
            if (
                policy == "supersede_own"
                and written_newer
                and peer["writable"]
                and same_cell(newer, older)
            ):
                target = await memory_sql.lock_current(conn, vis, older["memory_id"])
                if target is not None and target["status"] == "active" and target["writable"]:
                    await self.supersede(conn, caller, [target], newer["memory_id"], at)
                    state = "applied"
            row = await sql.record(
                conn, self._new(written, pair, finding, peer, caller, at, state=state)
            )
            if row is not None:
                out.append(conflict(row))
        return out

    @staticmethod
    def _new(
        written: Any,
        pair: tuple[uuid.UUID, uuid.UUID],
        finding: Finding,
        peer: Any,
        caller: Caller,
        at: datetime,
        state: str = "open",
    ) -> sql.NewConflict:
        return sql.NewConflict(
            tenant_id=written["tenant_id"], namespace=written["namespace"], newer_id=pair[1],
            older_id=pair[0], rule=finding.rule.value, state=state, overlap=finding.overlap,
            semantic=float(peer["cosine"]), detail=finding.detail,
            detected_by=caller.principal, at=at,
        )  # fmt: skip


async def conflict_marks(
    conn: asyncpg.Connection, vis: Any, hits: Sequence[Any]
) -> dict[Any, list[common_pb2.Conflict]]:
    """Open conflicts of each hit with another memory the caller sees, by memory id."""
    out: dict[Any, list[common_pb2.Conflict]] = {}
    for row in await sql.open_marks(conn, vis, [h.row["memory_id"] for h in hits]):
        shown = conflict(row)
        for memory_id in (row["newer_id"], row["older_id"]):
            out.setdefault(memory_id, []).append(shown)
    return out
