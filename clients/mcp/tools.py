"""The MCP tools of brain-mcp: argument checks, JSON shapes and one typed RPC per tool.

Every tool declares an input schema that refuses unknown arguments, a title and an output
schema; memories have one JSON shape everywhere (`memory_json`), and scores are relevance
from 0 to 1 (`relevance`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from brain.clients import AsyncBrainClient, DraftFields, time_travel
from brain.v1 import common_pb2, memory_pb2

__all__ = [
    "TOOLS",
    "TOOLS_BY_NAME",
    "ToolInputError",
    "ToolOutput",
    "ToolSpec",
    "check_arguments",
    "memory_json",
    "relevance",
]


# -- tool arguments ----------------------------------------------------------------------


class ToolInputError(ValueError):
    """The model passed arguments that do not fit the tool's schema."""


def _text(args: Mapping[str, Any], name: str, *, required: bool = False) -> str:
    value = args.get(name)
    if value is None or value == "":
        if required:
            raise ToolInputError(f"'{name}' is required and must be a non-empty string")
        return ""
    if not isinstance(value, str):
        raise ToolInputError(f"'{name}' must be a string")
    return value


def _strings(args: Mapping[str, Any], name: str) -> list[str]:
    value = args.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ToolInputError(f"'{name}' must be an array of strings")
    return value


def _number(args: Mapping[str, Any], name: str) -> float | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ToolInputError(f"'{name}' must be a number between 0 and 1")
    return float(value)


def _integer(args: Mapping[str, Any], name: str, *, low: int, high: int, default: int) -> int:
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ToolInputError(f"'{name}' must be an integer between {low} and {high}")
    return value


def _instant(args: Mapping[str, Any], name: str) -> datetime | None:
    text = _text(args, name)
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ToolInputError(
            f"'{name}' must be an ISO-8601 date or time, e.g. 2025-01-31 or 2025-01-31T09:00:00Z"
        ) from exc
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


# Argument names a model uses when it tries to pick the scope itself.
_SCOPE_ARGUMENTS = frozenset(
    {
        "user",
        "user_id",
        "userid",
        "namespace",
        "ns",
        "session",
        "session_id",
        "tenant",
        "tenant_id",
        "scope",
        "principal",
        "agent_id",
        "project",
    }
)


def check_arguments(tool: ToolSpec, args: Mapping[str, Any]) -> None:
    """Refuse names the schema does not declare, instead of silently dropping them."""
    known = tool.input_schema["properties"]
    extra = sorted(name for name in args if name not in known)
    scoped = [name for name in extra if name.lower() in _SCOPE_ARGUMENTS]
    if scoped:
        raise ToolInputError(
            f"{', '.join(repr(n) for n in scoped)}: the scope (user, namespace, session) comes "
            "from brain-mcp's configuration, never from tool arguments; call again without it"
        )
    if extra:
        raise ToolInputError(
            f"unknown argument {', '.join(repr(n) for n in extra)}; {tool.name} takes "
            f"{', '.join(known) or 'no arguments'}"
        )


# -- rendering ---------------------------------------------------------------------------


def relevance(value: float) -> float:
    """The server's calibrated relevance (0..1), rounded down to 3 decimals so that passing
    a shown score back as ``min_score`` keeps the hit it came from."""
    return math.floor(min(1.0, max(0.0, value)) * 1000) / 1000


_RANKINGS = {
    memory_pb2.RANKING_FUSED: "fused",
    memory_pb2.RANKING_RERANKED: "reranked",
    memory_pb2.RANKING_FUSED_RERANKER_UNAVAILABLE: "fused_reranker_unavailable",
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


# -- tools -------------------------------------------------------------------------------

ToolOutput = tuple[str, dict[str, Any]]
ToolRun = Callable[[AsyncBrainClient, Mapping[str, Any]], Awaitable[ToolOutput]]


@dataclass(frozen=True)
class ToolSpec:
    """One MCP tool and the typed RPC it forwards to."""

    name: str
    title: str
    method: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    run: ToolRun
    read_only: bool = False
    destructive: bool = False


_ID = {"type": "string", "description": "A memory id, as returned by remember or recall."}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_INSTANT = {"type": "string", "description": "ISO-8601 date or time, e.g. 2025-01-31T09:00:00Z."}
_DRAFT_PROPERTIES: dict[str, Any] = {
    "content": {"type": "string", "description": "The statement to remember, self-contained."},
    "kind": {"type": "string", "description": 'Category, e.g. "fact", "preference", "decision".'},
    "tags": {**_STRINGS, "description": "Free-form tags for filtering."},
    "labels": {
        **_STRINGS,
        "description": 'ACL labels (who may read it); default ["team"]. Only labels the key holds.',
    },
    "importance": {
        "type": "number",
        "minimum": 0,
        "maximum": 1,
        "description": "0..1, default 0.5.",
    },
    "supersedes": {**_STRINGS, "description": "Ids of memories this one replaces."},
    "valid_from": {
        "type": "string",
        "description": "ISO-8601 instant the fact starts to hold (default now).",
    },
    "valid_to": {"type": "string", "description": "ISO-8601 instant the fact stops holding."},
}
_READ_AT: dict[str, Any] = {
    "valid_at": {**_INSTANT, "description": "Facts that held at this instant (default now)."},
    "as_of": {
        **_INSTANT,
        "description": "What the brain believed at this instant (default now): time travel.",
    },
}
_OPTIONAL_TIME = {"type": ["string", "null"]}
_MEMORY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "version": {"type": "integer"},
        "status": {
            "type": "string",
            "description": "active, candidate, superseded, retracted, rejected or withdrawn",
        },
        "content": {"type": "string"},
        "kind": {"type": "string"},
        "tags": _STRINGS,
        "labels": _STRINGS,
        "importance": {"type": "number"},
        "confidence": {"type": "number"},
        "valid_from": _OPTIONAL_TIME,
        "valid_to": _OPTIONAL_TIME,
        "recorded_at": _OPTIONAL_TIME,
        "created_by": {"type": "string"},
        "change": {"type": "string"},
        "supersedes": _STRINGS,
        "superseded_by": _STRINGS,
        "proposal_reason": {"type": "string"},
    },
    "required": ["id", "version", "status", "content", "kind", "tags", "valid_from"],
}
_SCORE = {
    "type": "number",
    "minimum": 0,
    "maximum": 1,
    "description": "Relevance 0..1: the server's calibrated estimate that the memory answers "
    "the query, comparable across queries (a one-rare-word match is about 0.02, a strong "
    "match 0.2 and up).",
}


def _output(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


def _memories(**more: Any) -> dict[str, Any]:
    return _output({"memories": {"type": "array", "items": _MEMORY_SCHEMA}, **more})


def _draft_fields(args: Mapping[str, Any]) -> DraftFields:
    fields: DraftFields = {}
    if kind := _text(args, "kind"):
        fields["kind"] = kind
    if tags := _strings(args, "tags"):
        fields["tags"] = tags
    if labels := _strings(args, "labels"):
        fields["labels"] = labels
    if (importance := _number(args, "importance")) is not None:
        fields["importance"] = importance
    if (valid_from := _instant(args, "valid_from")) is not None:
        fields["valid_from"] = valid_from
    if (valid_to := _instant(args, "valid_to")) is not None:
        fields["valid_to"] = valid_to
    return fields


def _filter(args: Mapping[str, Any]) -> common_pb2.MemoryFilter | None:
    kind, tags = _text(args, "kind"), _strings(args, "tags")
    if not kind and not tags:
        return None
    return common_pb2.MemoryFilter(kinds=[kind] if kind else [], tags=tags)


def _time(args: Mapping[str, Any]) -> common_pb2.TimeTravel | None:
    as_of, valid_at = _instant(args, "as_of"), _instant(args, "valid_at")
    if as_of is None and valid_at is None:
        return None
    return time_travel(as_of=as_of, valid_at=valid_at)


async def _remember(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    # The client attaches one idempotency key per call, so its retries never store twice.
    response = await client.save(
        _text(args, "content", required=True),
        supersedes=_strings(args, "supersedes"),
        **_draft_fields(args),
    )
    outcome = memory_pb2.SaveOutcome.Name(response.outcome).removeprefix("SAVE_OUTCOME_").lower()
    m = response.memory
    says = {
        "deduplicated": f"An identical memory already existed; its id is {m.id}.",
        "proposed": f"Stored as candidate {m.id}; it awaits human review before it is recalled.",
    }.get(outcome, f"Remembered as {m.id}.")
    return says, {"id": m.id, "outcome": outcome, "memory": memory_json(m)}


async def _recall(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    query = _text(args, "query", required=True)
    limit = _integer(args, "limit", low=1, high=50, default=10)
    response = await client.search(
        query,
        limit=limit,
        filter=_filter(args),
        time=_time(args),
        min_relevance=_number(args, "min_score"),
    )
    ranking = _RANKINGS.get(response.ranking, "fused")
    reranked = response.ranking == memory_pb2.RANKING_RERANKED
    hits = []
    for h in response.hits:
        lanes = (("keywords", h.lexical_rank), ("exact words", h.exact_rank))
        hit: dict[str, Any] = {
            "id": h.memory.id,
            "score": relevance(h.relevance),
            "matched_by": [lane for lane, rank in (*lanes, ("meaning", h.semantic_rank)) if rank],
            "memory": memory_json(h.memory),
        }
        if reranked and h.rerank_score:
            hit["rerank_score"] = round(h.rerank_score, 4)
        hits.append(hit)
    silenced = not hits and response.below_floor > 0
    structured = {
        "hits": hits,
        "ranking": ranking,
        "silenced": silenced,
        "below_floor": response.below_floor,
    }
    if silenced:
        return (
            f"Nothing relevant enough: {response.below_floor} weak matches were held back by "
            "the relevance floor (min_score 0 shows them).",
            structured,
        )
    if not hits:
        return "No memories found.", structured
    order = {
        "fused": "fused order",
        "reranked": "reranked by the configured reranker",
        "fused_reranker_unavailable": "fused order; the reranker was unavailable",
    }[ranking]
    lines = [f"{len(hits)} memories, best first ({order}; score = relevance 0..1):"]
    for i, (h, shown) in enumerate(zip(response.hits, hits, strict=True), 1):
        extra = f", rerank {shown['rerank_score']:.3f}" if "rerank_score" in shown else ""
        lines.append(f"{i}. score {shown['score']:.2f}{extra} {_line(h.memory)}")
    return "\n".join(lines), structured


async def _list_memories(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    response = await client.list_page(
        filter=_filter(args),
        time=_time(args),
        page_size=_integer(args, "limit", low=1, high=100, default=20),
        page_token=_text(args, "page_token"),
    )
    found = list(response.memories)
    structured = {
        "memories": [memory_json(m) for m in found],
        "next_page_token": response.next_page_token,
    }
    lines = [_line(m) for m in found] or ["No memories."]
    if response.next_page_token:
        lines.append(f"More: call list_memories with page_token={response.next_page_token}")
    return "\n".join(lines), structured


async def _get_memory(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    m = (await client.get(_text(args, "id", required=True))).memory
    return json.dumps(memory_json(m), indent=2), {"memory": memory_json(m)}


_UPDATABLE = ("content", "kind", "tags", "labels", "importance", "valid_from", "valid_to")


async def _update_memory(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    memory_id = _text(args, "id", required=True)
    content = _text(args, "content") or None
    fields = _draft_fields(args)
    if content is None and not fields:
        raise ToolInputError(f"give at least one field to change: {', '.join(_UPDATABLE)}")
    m = (
        await client.update(
            memory_id,
            content=content,
            expected_version=_integer(args, "expected_version", low=0, high=2**31 - 1, default=0),
            **fields,
        )
    ).memory
    says = (
        f"Stored the change as candidate {m.id}; it awaits human review."
        if m.status == common_pb2.MEMORY_STATUS_CANDIDATE
        else f"Updated {m.id}; it is now version {m.version}."
    )
    return says, {"id": m.id, "version": m.version, "memory": memory_json(m)}


async def _get_memory_history(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    versions = (await client.history(_text(args, "id", required=True))).versions
    lines = [
        f"v{v.version} {_iso(v.recorded_at)} {v.change or 'save'} by {v.changed_by or '?'}: "
        f"({_status(v.status)}) {v.content}"
        for v in versions
    ]
    return "\n".join(lines) or "No versions.", {"versions": [memory_json(v) for v in versions]}


async def _forget(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    response = await client.forget(
        _text(args, "id", required=True), reason=_text(args, "reason", required=True)
    )
    text = f"Forgot {response.id}; its content is erased and cannot be saved again here."
    return text, {"id": response.id, "tombstone_id": response.tombstone_id}


async def _propose_memory(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    response = await client.propose(
        _text(args, "content", required=True),
        reason=_text(args, "reason", required=True),
        supersedes=_strings(args, "supersedes"),
        **_draft_fields(args),
    )
    c = response.candidate
    return f"Proposed as candidate {c.id}; a reviewer must approve it.", {
        "id": c.id,
        "memory": memory_json(c),
    }


async def _list_candidates(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    limit = _integer(args, "limit", low=1, high=100, default=20)
    found: list[common_pb2.Memory] = []
    async for candidate in client.list_candidates(
        proposed_by=_text(args, "proposed_by"), page_size=limit
    ):
        found.append(candidate)
        if len(found) >= limit:
            break
    if not found:
        return "No pending candidates.", {"candidates": []}
    lines = [f"{_line(c)} — proposed by {c.created_by}: {c.proposal_reason}" for c in found]
    return "\n".join(lines), {"candidates": [memory_json(c) for c in found]}


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


async def _search_knowledge(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    query = _text(args, "query", required=True)
    response = await client.search_knowledge(
        query,
        limit=_integer(args, "limit", low=1, high=50, default=5),
        collections=_strings(args, "collections"),
    )
    hits = [
        {
            "score": relevance(h.score),
            "source": _source_json(h.source),
            "content": h.content,
        }
        for h in response.hits
    ]
    if not hits:
        return "No documents found.", {"hits": []}
    lines = [f"{len(hits)} passages, best first (score = relevance 0..1):"]
    for i, h in enumerate(response.hits, 1):
        lines.append(f"{i}. score {relevance(h.score):.2f} {_cite(h.source)}\n{h.content}")
    return "\n".join(lines), {"hits": hits}


async def _build_context(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    response = await client.build_context(
        _text(args, "query", required=True),
        token_budget=_integer(args, "token_budget", low=1, high=100_000, default=0),
    )
    items = []
    for i in response.items:
        item: dict[str, Any] = {"id": i.id, "score": relevance(i.score), "tokens": i.tokens}
        if i.kind == memory_pb2.CONTEXT_ITEM_KIND_KNOWLEDGE:
            item.update(kind="knowledge", source=_source_json(i.source))
        else:
            item["kind"] = "memory"
        items.append(item)
    structured = {
        "context": response.context,
        "items": items,
        "tokens_used": response.tokens_used,
        "omitted": response.omitted,
    }
    return response.context or "No relevant memories.", structured


def _schema(properties: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_MEMORY = "/brain.v1.MemoryService/"
_KNOWLEDGE = "/brain.v1.KnowledgeService/"
_SOURCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Where the passage is: document, collection, path, headings and lines.",
    "properties": {
        "document_id": {"type": "string"},
        "version": {"type": "integer"},
        "collection": {"type": "string"},
        "path": {"type": "string"},
        "heading_path": _STRINGS,
        "line_start": {"type": "integer"},
        "line_end": {"type": "integer"},
    },
    "required": ["document_id", "collection", "path", "line_start", "line_end"],
}
_REVIEW = "/brain.v1.ReviewService/"
_HISTORY_DESCRIPTION = (
    "List every version of one memory, oldest first: who changed it, when, and how."
)
_HISTORY_OUTPUT = _output({"versions": {"type": "array", "items": _MEMORY_SCHEMA}})
_FILTERS: dict[str, Any] = {
    "kind": {"type": "string", "description": "Only memories of this kind."},
    "tags": {**_STRINGS, "description": "Only memories carrying every one of these tags."},
}

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "remember",
        "Remember",
        _MEMORY + "SaveMemory",
        "Save a durable fact, preference or decision to the shared long-term memory. Write one "
        "self-contained statement. To correct an older memory, pass its id in `supersedes`. "
        "The result includes the new memory id.",
        _schema(_DRAFT_PROPERTIES, ["content"]),
        _output(
            {
                "id": {"type": "string"},
                "outcome": {
                    "type": "string",
                    "description": "created, deduplicated, proposed (awaits review) or replayed",
                },
                "memory": _MEMORY_SCHEMA,
            }
        ),
        _remember,
    ),
    ToolSpec(
        "recall",
        "Recall memories",
        _MEMORY + "SearchMemories",
        "Search the shared long-term memory (keyword + semantic). Returns the best matching "
        "active memories, best first, each with a relevance score from 0 to 1, or nothing "
        "when no memory is relevant enough (silenced = true: weak matches were held back by "
        "the server's relevance floor). Says how the hits were ordered (fused, or reranked). "
        "Filter by kind, tags, or time (valid_at: facts true then; as_of: what was known then).",
        _schema(
            {
                "query": {"type": "string", "description": "What to look for, in plain words."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
                "min_score": {
                    **_SCORE,
                    "description": "Answer only if the best hit reaches this relevance "
                    "(default: the server's floor; 0 shows every match).",
                },
                **_FILTERS,
                **_READ_AT,
            },
            ["query"],
        ),
        _output(
            {
                "hits": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "score": _SCORE,
                            "matched_by": {
                                **_STRINGS,
                                "description": "Lanes that found it: keywords, exact words, "
                                "meaning.",
                            },
                            "rerank_score": {
                                "type": "number",
                                "description": "The reranker's score, when it ordered the hits.",
                            },
                            "memory": _MEMORY_SCHEMA,
                        },
                        "required": ["id", "score", "matched_by", "memory"],
                    },
                },
                "ranking": {
                    "type": "string",
                    "enum": ["fused", "reranked", "fused_reranker_unavailable"],
                    "description": "How the hits were ordered: the lanes fused, reordered by "
                    "the configured reranker, or fused because the reranker failed.",
                },
                "silenced": {
                    "type": "boolean",
                    "description": "True when memories matched but none reached the floor.",
                },
                "below_floor": {
                    "type": "integer",
                    "description": "Matches held back by the relevance floor.",
                },
            }
        ),
        _recall,
        read_only=True,
    ),
    ToolSpec(
        "list_memories",
        "List recent memories",
        _MEMORY + "ListMemories",
        "List memories newest first, a page at a time (no query needed), optionally only one "
        "kind or tags. Pass next_page_token back as page_token for the next page.",
        _schema(
            {
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
                "page_token": {"type": "string", "description": "From the previous page."},
                **_FILTERS,
                **_READ_AT,
            }
        ),
        _memories(next_page_token={"type": "string", "description": "Empty on the last page."}),
        _list_memories,
        read_only=True,
    ),
    ToolSpec(
        "get_memory",
        "Get a memory",
        _MEMORY + "GetMemory",
        "Read one memory by id, with its status, validity period and provenance.",
        _schema({"id": _ID}, ["id"]),
        _output({"memory": _MEMORY_SCHEMA}),
        _get_memory,
        read_only=True,
    ),
    ToolSpec(
        "update_memory",
        "Update a memory",
        _MEMORY + "UpdateMemory",
        "Change fields of one memory (content, kind, tags, labels, importance, validity). The "
        "old version is kept in its history. To replace a fact by a different one, remember "
        "the new one with `supersedes` instead.",
        _schema(
            {
                "id": _ID,
                **{k: v for k, v in _DRAFT_PROPERTIES.items() if k != "supersedes"},
                "expected_version": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Fail instead of overwriting if the memory has moved on.",
                },
            },
            ["id"],
        ),
        _output(
            {"id": {"type": "string"}, "version": {"type": "integer"}, "memory": _MEMORY_SCHEMA}
        ),
        _update_memory,
    ),
    ToolSpec(
        "get_memory_history",
        "Get a memory's history",
        _MEMORY + "GetMemoryHistory",
        _HISTORY_DESCRIPTION,
        _schema({"id": _ID}, ["id"]),
        _HISTORY_OUTPUT,
        _get_memory_history,
        read_only=True,
    ),
    ToolSpec(
        "memory_history",
        "Get a memory's history (old name)",
        _MEMORY + "GetMemoryHistory",
        "Old name of get_memory_history, kept so existing prompts and allowlists work. "
        + _HISTORY_DESCRIPTION,
        _schema({"id": _ID}, ["id"]),
        _HISTORY_OUTPUT,
        _get_memory_history,
        read_only=True,
    ),
    ToolSpec(
        "forget",
        "Forget a memory",
        _MEMORY + "ForgetMemory",
        "Erase a memory that is wrong or must not be kept. Its content is deleted in every "
        "version and the same statement cannot be saved again in this scope. Give a reason.",
        _schema(
            {"id": _ID, "reason": {"type": "string", "description": "Why it is forgotten."}},
            ["id", "reason"],
        ),
        _output({"id": {"type": "string"}, "tombstone_id": {"type": "string"}}),
        _forget,
        destructive=True,
    ),
    ToolSpec(
        "propose_memory",
        "Propose a memory",
        _REVIEW + "ProposeMemory",
        "Propose a memory for human review instead of saving it directly. It is not recalled "
        "until a reviewer approves it. Explain in `reason` why it is worth remembering.",
        _schema(
            {
                **_DRAFT_PROPERTIES,
                "reason": {"type": "string", "description": "Why this should be remembered."},
            },
            ["content", "reason"],
        ),
        _output({"id": {"type": "string"}, "memory": _MEMORY_SCHEMA}),
        _propose_memory,
    ),
    ToolSpec(
        "list_candidates",
        "List candidates awaiting review",
        _REVIEW + "ListCandidates",
        "List proposed memories that are still waiting for review.",
        _schema(
            {
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
                "proposed_by": {"type": "string", "description": "Only this proposer's."},
            }
        ),
        _output({"candidates": {"type": "array", "items": _MEMORY_SCHEMA}}),
        _list_candidates,
        read_only=True,
    ),
    ToolSpec(
        "build_context",
        "Build context for a task",
        _MEMORY + "BuildContext",
        "Get a compact, ready-to-read block of the memories most relevant to a task or "
        "question, packed into a token budget.",
        _schema(
            {
                "query": {"type": "string", "description": "The task or question."},
                "token_budget": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100000,
                    "description": "Upper bound for the block, in tokens (server default 1000).",
                },
            },
            ["query"],
        ),
        _output(
            {
                "context": {"type": "string"},
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "score": _SCORE,
                            "tokens": {"type": "integer"},
                            "kind": {"type": "string", "description": "memory or knowledge"},
                            "source": _SOURCE_SCHEMA,
                        },
                        "required": ["id", "score", "tokens"],
                    },
                },
                "tokens_used": {"type": "integer"},
                "omitted": {"type": "integer"},
            }
        ),
        _build_context,
        read_only=True,
    ),
    ToolSpec(
        "search_knowledge",
        "Search team documents",
        _KNOWLEDGE + "SearchKnowledge",
        "Search the team's documents (runbooks, docs, code ingested with `brain ingest`) by "
        "keywords and meaning. Returns passages, best first, each with where it comes from "
        "(collection, path, section headings, line range) so you can cite it. Use recall for "
        "what was decided or said; use this for what the documents say.",
        _schema(
            {
                "query": {"type": "string", "description": "What to look for, in plain words."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
                "collections": {**_STRINGS, "description": "Only these collections."},
            },
            ["query"],
        ),
        _output(
            {
                "hits": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "score": _SCORE,
                            "source": _SOURCE_SCHEMA,
                            "content": {"type": "string"},
                        },
                        "required": ["score", "source", "content"],
                    },
                }
            }
        ),
        _search_knowledge,
        read_only=True,
    ),
)
TOOLS_BY_NAME = {t.name: t for t in TOOLS}
