"""The results of brain-mcp's tools: one JSON shape per object and one line of text.

Memories have one JSON shape everywhere (`memory_json`), entities and relations one each, a
knowledge passage says where it comes from (`_source_json`, `_cite`), and scores are relevance
from 0 to 1 (`relevance`). Every tool returns a `ToolOutput`: the text the model reads and the
structured content its output schema declares.
"""

from __future__ import annotations

import math
from datetime import UTC
from typing import Any

from brain.v1 import common_pb2, graph_pb2, knowledge_pb2, memory_pb2

ToolOutput = tuple[str, dict[str, Any]]


def relevance(value: float) -> float:
    """The server's calibrated relevance (0..1), rounded down to 3 decimals so that passing
    a shown score back as ``min_score`` keeps the hit it came from."""
    return math.floor(min(1.0, max(0.0, value)) * 1000) / 1000


_RANKINGS = {
    memory_pb2.RANKING_FUSED: "fused",
    memory_pb2.RANKING_RERANKED: "reranked",
    memory_pb2.RANKING_FUSED_RERANKER_UNAVAILABLE: "fused_reranker_unavailable",
}
_KNOWLEDGE_RANKINGS = {
    knowledge_pb2.KNOWLEDGE_RANKING_FUSED: "fused",
    knowledge_pb2.KNOWLEDGE_RANKING_RERANKED: "reranked",
    knowledge_pb2.KNOWLEDGE_RANKING_FUSED_RERANKER_UNAVAILABLE: "fused_reranker_unavailable",
}
# How each ranking reads in a tool's text.
_ORDERS = {
    "fused": "fused order",
    "reranked": "reordered by reading query and passages (the configured reranker, or the "
    "server's late interaction for knowledge)",
    "fused_reranker_unavailable": "fused order; the reranker was unavailable",
}


def _iso(ts: Any) -> str | None:
    if not ts.seconds and not ts.nanos:
        return None
    return str(ts.ToDatetime(tzinfo=UTC).isoformat().replace("+00:00", "Z"))


def _status(value: int) -> str:
    name = common_pb2.MemoryStatus.Name(value)  # type: ignore[arg-type]
    return str(name).removeprefix("MEMORY_STATUS_").lower()


def memory_json(m: common_pb2.Memory) -> dict[str, Any]:
    """The fields of a memory an agent can act on, as JSON-ready values (`_MEMORY_SCHEMA`)."""
    out: dict[str, Any] = {
        "id": m.id,
        "version": m.version,
        "status": _status(m.status),
        "content": m.content,
        "kind": m.kind,
        "tags": list(m.tags),
        "labels": list(m.labels),
        "importance": round(m.importance, 4),
        "confidence": round(m.confidence, 4),
        "valid_from": _iso(m.valid_from),
        "valid_to": _iso(m.valid_to),
        "recorded_at": _iso(m.recorded_at),
        "created_by": m.created_by,
        "change": m.change,
        "supersedes": list(m.supersedes),
        "superseded_by": list(m.superseded_by),
    }
    if m.proposal_reason:
        out["proposal_reason"] = m.proposal_reason
    return out


def _line(m: common_pb2.Memory) -> str:
    when = _iso(m.valid_from)
    extra = f", valid from {when}" if when else ""
    tags = f" #{' #'.join(m.tags)}" if m.tags else ""
    return (
        f"[{m.id}] v{m.version} ({_status(m.status)}, {m.kind or 'note'}{extra}) {m.content}{tags}"
    )


def _source_json(s: common_pb2.ChunkSource) -> dict[str, Any]:
    """Where a knowledge chunk comes from, to cite it (`_SOURCE_SCHEMA`)."""
    return {
        "document_id": s.document_id,
        "version": s.version,
        "collection": s.collection,
        "path": s.path,
        "heading_path": list(s.heading_path),
        "line_start": s.line_start,
        "line_end": s.line_end,
    }


def _cite(s: common_pb2.ChunkSource) -> str:
    where = f"{s.collection}/{s.path}"
    if s.heading_path:
        where += " § " + " > ".join(s.heading_path)
    return f"{where} (lines {s.line_start}-{s.line_end})"


def entity_json(e: graph_pb2.Entity) -> dict[str, Any]:
    return {
        "id": e.id,
        "name": e.name,
        "types": list(e.types),
        "aliases": list(e.aliases),
        "mention_count": e.mention_count,
        "degree": e.degree,
    }


def relation_json(r: graph_pb2.Relation) -> dict[str, Any]:
    return {
        "id": r.id,
        "subject": r.subject.name,
        "predicate": r.predicate,
        "object": r.object.name,
        "single_valued": r.cardinality == graph_pb2.CARDINALITY_ONE,
        "valid_from": _iso(r.valid_from),
        "valid_to": _iso(r.valid_to),
        "recorded_at": _iso(r.recorded_at),
        "memory_id": r.memory_id,
    }


def _fact(r: graph_pb2.Relation) -> str:
    until = f" until {_iso(r.valid_to)}" if r.HasField("valid_to") else ""
    return (
        f"{r.subject.name} -{r.predicate}-> {r.object.name} "
        f"(from {_iso(r.valid_from)}{until}; memory {r.memory_id})"
    )


_RULES = {
    common_pb2.CONFLICT_RULE_VALUE_UPDATE: "value update",
    common_pb2.CONFLICT_RULE_CORRECTION: "correction",
    common_pb2.CONFLICT_RULE_SLOT: "single-valued relation",
    common_pb2.CONFLICT_RULE_RESTATEMENT: "restatement",
}


def conflict_json(c: common_pb2.Conflict) -> dict[str, Any]:
    return {
        "id": c.id,
        "newer_id": c.newer_id,
        "older_id": c.older_id,
        "rule": _RULES.get(c.rule, "unknown"),
        "state": common_pb2.ConflictState.Name(c.state).removeprefix("CONFLICT_STATE_").lower(),
        "detail": c.detail,
    }


def conflict_line(c: common_pb2.Conflict, me: str) -> str:
    """What an agent reads about one conflict of memory ``me``."""
    rule = _RULES.get(c.rule, "conflict")
    state = common_pb2.ConflictState.Name(c.state).removeprefix("CONFLICT_STATE_").lower()
    pending = {
        "open": "pending review",
        "applied": "superseded now",
        "noted": "not proposed: name it in supersedes to replace it",
    }.get(state, state)
    if c.older_id == me:
        return f"! may be outdated: {c.newer_id} may replace it ({rule}: {c.detail}; {pending})"
    return f"! conflicts with {c.older_id} ({rule}: {c.detail}; {pending})"
