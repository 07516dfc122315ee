"""The MCP tools of brain-mcp, as data: one `ToolSpec` per tool in `TOOLS`.

Every tool declares an input schema that refuses unknown arguments, a title and an output
schema; memories have one JSON shape everywhere (`memory_json`), and scores are relevance
from 0 to 1 (`relevance`). Where the rest lives:

    _arguments.py   reading the model's arguments (`ToolInputError`) and building requests
    _results.py     the JSON shape and text of each result (`memory_json`, `relevance`)
    _handlers.py    the handler of each tool: arguments in, one typed RPC, result out
    _schemas.py     the JSON Schema pieces the table below is built from
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from brain.clients import AsyncBrainClient
from brain.clients.mcp._arguments import ToolInputError, refuse_invalid_text
from brain.clients.mcp._handlers import (
    _build_context,
    _entity_neighbours,
    _forget,
    _get_memory,
    _get_memory_history,
    _list_candidates,
    _list_memories,
    _lookup_entity,
    _propose_memory,
    _recall,
    _remember,
    _search_knowledge,
    _update_memory,
)
from brain.clients.mcp._results import ToolOutput, memory_json, relevance
from brain.clients.mcp._schemas import (
    _ABOUT,
    _DRAFT_PROPERTIES,
    _ENTITY_NAME,
    _ENTITY_SCHEMA,
    _FILTERS,
    _HISTORY_OUTPUT,
    _ID,
    _MEMORY_SCHEMA,
    _RANK_SCORE,
    _READ_AT,
    _RELATION_SCHEMA,
    _SCORE,
    _SOURCE_SCHEMA,
    _STRINGS,
    CONFLICTS,
    MAX_TOKEN_BUDGET,
    _memories,
    _output,
    _schema,
)

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
    """Refuse names the schema does not declare, instead of silently dropping them, and
    strings that are not Unicode text (`refuse_invalid_text`)."""
    refuse_invalid_text(args)
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


_MEMORY = "/brain.v1.MemoryService/"
_KNOWLEDGE = "/brain.v1.KnowledgeService/"
_REVIEW = "/brain.v1.ReviewService/"
_GRAPH = "/brain.v1.GraphService/"
_HISTORY_DESCRIPTION = (
    "List every version of one memory, oldest first: who changed it, when, and how."
)

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "remember",
        "Remember",
        _MEMORY + "SaveMemory",
        "Save a durable fact, preference or decision to the shared long-term memory. Write one "
        "self-contained statement. To correct an older memory, pass its id in `supersedes`. "
        "The result includes the new memory id, and `conflicts`: older memories this one "
        "seems to update or restate (pending a reviewer's decision).",
        _schema({**_DRAFT_PROPERTIES, "about": _ABOUT}, ["content"]),
        _output(
            {
                "id": {"type": "string"},
                "outcome": {
                    "type": "string",
                    "description": "created, deduplicated, proposed (awaits review) or replayed",
                },
                "memory": _MEMORY_SCHEMA,
                "conflicts": CONFLICTS,
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
                            "conflicts": {
                                **CONFLICTS,
                                "description": "Open conflicts: when this memory is the "
                                "older_id, it may be outdated.",
                            },
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
                "about": _ABOUT,
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
                    "maximum": MAX_TOKEN_BUDGET,
                    "description": "Upper bound for the block, in tokens (server default 1000, "
                    f"at most {MAX_TOKEN_BUDGET}).",
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
                            "score": _RANK_SCORE,
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
                "min_score": {
                    **_SCORE,
                    "description": "Answer only if the best passage reaches this relevance "
                    "(default: the server's floor; 0 shows every match).",
                },
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
                            "rerank_score": {
                                "type": "number",
                                "description": "The reranker's score, when it ordered the hits.",
                            },
                        },
                        "required": ["score", "source", "content"],
                    },
                },
                "ranking": {
                    "type": "string",
                    "enum": ["fused", "reranked", "fused_reranker_unavailable"],
                    "description": "How the passages were ordered: the lanes fused, reordered "
                    "by the configured reranker, or fused because the reranker failed.",
                },
                "silenced": {
                    "type": "boolean",
                    "description": "True when passages matched but none reached the floor.",
                },
                "below_floor": {
                    "type": "integer",
                    "description": "How many passages the relevance floor held back.",
                },
            }
        ),
        _search_knowledge,
        read_only=True,
    ),
    ToolSpec(
        "lookup_entity",
        "Look up an entity",
        _GRAPH + "LookupEntity",
        "Look up a person, project, place or thing by name or alias in the shared memory's "
        "entity graph: its aliases, how many memories mention it, and its relations (facts "
        "such as who leads what), each with the memory that asserted it. valid_at: facts "
        "true then; as_of: what was known then.",
        _schema(
            {
                "name": _ENTITY_NAME,
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 50},
                **_READ_AT,
            },
            ["name"],
        ),
        _output(
            {"entity": _ENTITY_SCHEMA, "relations": {"type": "array", "items": _RELATION_SCHEMA}}
        ),
        _lookup_entity,
        read_only=True,
    ),
    ToolSpec(
        "entity_neighbours",
        "Entities related to an entity",
        _GRAPH + "ListNeighbours",
        "List the entities related to one entity, up to 3 hops away, nearest first, each with "
        "the relation that reached it.",
        _schema(
            {
                "name": _ENTITY_NAME,
                "depth": {"type": "integer", "minimum": 1, "maximum": 3, "default": 1},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 50},
                **_READ_AT,
            },
            ["name"],
        ),
        _output(
            {
                "entity": _ENTITY_SCHEMA,
                "neighbours": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "depth": {"type": "integer"},
                            "entity": _ENTITY_SCHEMA,
                            "via": _RELATION_SCHEMA,
                        },
                        "required": ["depth", "entity", "via"],
                    },
                },
            }
        ),
        _entity_neighbours,
        read_only=True,
    ),
)
TOOLS_BY_NAME = {t.name: t for t in TOOLS}
