"""The JSON Schema pieces the tool table is built from: shared argument properties and the
output shapes of memories, knowledge sources, entities and relations.

Each output shape matches the function in `_results` that fills it (`_MEMORY_SCHEMA` and
`memory_json`, `_SOURCE_SCHEMA` and `_source_json`, `_ENTITY_SCHEMA` and `entity_json`,
`_RELATION_SCHEMA` and `relation_json`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# The largest token_budget brain-server accepts in BuildContext (MAX_TOKEN_BUDGET in
# server/domain/context.py, which clients do not import; a test holds the two equal).
MAX_TOKEN_BUDGET = 32_000
_ID = {"type": "string", "description": "A memory id, as returned by remember or recall."}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_INSTANT = {"type": "string", "description": "ISO-8601 date or time, e.g. 2025-01-31T09:00:00Z."}
_DRAFT_PROPERTIES: dict[str, Any] = {
    "content": {"type": "string", "description": "The statement to remember, self-contained."},
    "kind": {"type": "string", "description": 'Category, e.g. "fact", "preference", "decision".'},
    "tags": {**_STRINGS, "description": "Free-form tags for filtering."},
    "labels": {
        **_STRINGS,
        "description": 'ACL labels (who may read it); default ["team"], or with supersedes the '
        "replaced memories' labels, which it must keep. Only labels the key holds (or keeps).",
    },
    "importance": {
        "type": "number",
        "minimum": 0,
        "maximum": 1,
        "description": "0..1, default 0.5.",
    },
    "supersedes": {
        **_STRINGS,
        "description": "Ids of memories this one replaces; it reaches all their readers.",
    },
    "valid_from": {
        "type": "string",
        "description": "ISO-8601 instant the fact starts to hold (default now).",
    },
    "valid_to": {"type": "string", "description": "ISO-8601 instant the fact stops holding."},
}
# Who and what a memory is about (GraphDraft entities): remember and propose_memory only.
_ABOUT: dict[str, Any] = {
    "type": "array",
    "maxItems": 64,
    "items": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "As the memory names it."},
            "type": {
                "type": "string",
                "description": "person, organization, place, project, product, event or other",
            },
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    "description": "Who and what the memory is about. Recall matches these names: a "
    "memory about the person a question names ranks first.",
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

# build_context's items carry the server's fused ranking score (ContextItem.score), not a
# relevance: it orders the block and is not comparable across queries (it may pass 1).
_RANK_SCORE = {
    "type": "number",
    "minimum": 0,
    "description": "The server's fused ranking score: orders the items of this block; not a "
    "calibrated relevance, not comparable across queries, and it may exceed 1.",
}


def _output(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


def _memories(**more: Any) -> dict[str, Any]:
    return _output({"memories": {"type": "array", "items": _MEMORY_SCHEMA}, **more})


def _schema(properties: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


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
_ENTITY_NAME = {"type": "string", "description": "A name or alias of the entity (any case)."}
_ENTITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "types": _STRINGS,
        "aliases": _STRINGS,
        "mention_count": {"type": "integer"},
        "degree": {"type": "integer"},
    },
    "required": ["id", "name", "types", "aliases", "mention_count", "degree"],
}
_RELATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "subject": {"type": "string"},
        "predicate": {"type": "string"},
        "object": {"type": "string"},
        "single_valued": {"type": "boolean"},
        "valid_from": _OPTIONAL_TIME,
        "valid_to": _OPTIONAL_TIME,
        "recorded_at": _OPTIONAL_TIME,
        "memory_id": {"type": "string"},
    },
    "required": ["id", "subject", "predicate", "object", "valid_from", "memory_id"],
}
_CONFLICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Two memories that disagree: the newer may replace the older once a "
    "reviewer approves (state open), or was not proposed (noted).",
    "properties": {
        "id": {"type": "string"},
        "newer_id": {"type": "string"},
        "older_id": {"type": "string"},
        "rule": {"type": "string"},
        "state": {"type": "string"},
        "detail": {"type": "string"},
    },
    "required": ["newer_id", "older_id", "rule", "state"],
}
CONFLICTS = {"type": "array", "items": _CONFLICT_SCHEMA}
_HISTORY_OUTPUT = _output({"versions": {"type": "array", "items": _MEMORY_SCHEMA}})
_FILTERS: dict[str, Any] = {
    "kind": {"type": "string", "description": "Only memories of this kind."},
    "tags": {**_STRINGS, "description": "Only memories carrying every one of these tags."},
}
