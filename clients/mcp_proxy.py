"""brain-mcp: a stdio MCP server that forwards typed tools to the Shared Brain gRPC API.

    brain-mcp                 serve MCP over stdin/stdout (what an MCP host launches)
    brain-mcp hook recall     prompt-submit hook: print a context block for the prompt on stdin
    brain-mcp hook capture    stop/session-end hook: propose the session's "remember this"
                              moments as candidates for human review

Where to connect, which key to use and which bucket to act in come only from the environment
(or the flags that override it), never from the model, so what an agent saves and what it
recalls share one scope by construction:

    BRAIN_TARGET      host:port of brain-server (default 127.0.0.1:50051)
    BRAIN_API_KEY     the agent's API key (required)
    BRAIN_USER_ID     scope.user_id stamped on every call (unset: the key's user, if it fixes one)
    BRAIN_NAMESPACE   scope.namespace (unset: the key's namespace, if it allows exactly one)
    BRAIN_SESSION_ID  scope.session_id (optional)
    BRAIN_TLS_CA      path to a PEM root CA; turns TLS on (BRAIN_TLS=1 uses the system roots;
                      BRAIN_TLS_CERT + BRAIN_TLS_KEY add a client certificate for mTLS)
    BRAIN_TIMEOUT     per-call deadline in seconds for tools (default 10)
    BRAIN_RECHECK_AFTER     seconds an unreachable server is remembered before asking again (2)
    BRAIN_HOOK_TIMEOUT      deadline of `hook recall` (default 2)
    BRAIN_HOOK_TOKEN_BUDGET token budget of `hook recall` (default: the server's)

Each tool maps to one typed RPC; there is no generic pass-through. At start the proxy asks
WhoAmI with an empty scope, checks the configured scope against the key's confinement (taking
unset fields from the key where it allows exactly one value), reports what is wrong on stderr
and in the server instructions, and lists only the tools whose RPC the key may call. While the
server cannot be reached every tool fails at once with the remembered error, and the proxy asks
again after BRAIN_RECHECK_AFTER seconds; one warning per outage, one note when it is back.
gRPC failures become MCP tool errors carrying the server's message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from brain.v1 import common_pb2, identity_pb2, memory_pb2

from .client import AsyncBrainClient, BrainClient, DraftFields, RetryPolicy, Scope, time_travel
from .errors import BrainClientError, FailedPrecondition, InvalidArgument, RateLimited
from .mcp_capture import (
    CaptureError,
    explicit_requests,
    extract_facts,
    proposals,
    read_transcript,
)

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.lowlevel import Server

__all__ = ["TOOLS", "BrainProxy", "ProxyConfig", "main", "resolve_scope"]

_log = logging.getLogger("brain.mcp")

DEFAULT_TARGET = "127.0.0.1:50051"
# WhoAmI at start must not hold up the host's handshake for long when the server is down.
_IDENTITY_TIMEOUT = 3.0
# Tool calls retry a refused connection briefly (a restart), so a downed server fails in
# well under a second instead of after the client's default backoff of several seconds.
_TOOL_RETRY = RetryPolicy(max_attempts=3, initial_backoff=0.1, max_backoff=0.3)


# -- configuration -----------------------------------------------------------------------


@dataclass(frozen=True)
class ProxyConfig:
    """Where to connect and which scope to stamp; read from flags, then the environment."""

    target: str
    api_key: str
    user_id: str = ""
    namespace: str = ""
    session_id: str = ""
    tls: bool = False
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    timeout: float = 10.0
    recheck_after: float = 2.0

    @property
    def scope(self) -> common_pb2.Scope:
        return Scope(user_id=self.user_id, namespace=self.namespace, session_id=self.session_id)

    @classmethod
    def from_args(cls, args: argparse.Namespace, env: Mapping[str, str]) -> ProxyConfig:
        """Flags win over the environment; unset flags fall back to `BRAIN_*` variables."""

        def pick(flag: str | None, var: str, default: str = "") -> str:
            return flag if flag is not None else env.get(var, default)

        tls_ca = pick(args.tls_ca, "BRAIN_TLS_CA") or None
        return cls(
            target=pick(args.target, "BRAIN_TARGET", DEFAULT_TARGET),
            api_key=pick(args.api_key, "BRAIN_API_KEY").strip(),
            user_id=pick(args.user_id, "BRAIN_USER_ID"),
            namespace=pick(args.namespace, "BRAIN_NAMESPACE"),
            session_id=pick(args.session_id, "BRAIN_SESSION_ID"),
            tls=env.get("BRAIN_TLS", "").lower() in {"1", "true", "yes"} or tls_ca is not None,
            tls_ca=tls_ca,
            tls_cert=env.get("BRAIN_TLS_CERT") or None,
            tls_key=env.get("BRAIN_TLS_KEY") or None,
            timeout=float(env.get("BRAIN_TIMEOUT") or 10.0),
            recheck_after=float(env.get("BRAIN_RECHECK_AFTER") or 2.0),
        )

    def where(self) -> str:
        """The scope in words, for messages to the model and the user."""
        where = f"namespace {self.namespace or '(default)'}, user {self.user_id or '(shared)'}"
        return where + (f", session {self.session_id}" if self.session_id else "")

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments shared by `BrainClient` and `AsyncBrainClient`."""
        return {
            "scope": self.scope,
            "tls": self.tls,
            "root_certificates": self.tls_ca,
            "certificate_chain": self.tls_cert,
            "private_key": self.tls_key,
        }


# (field, setting, noun) for each scope field a key may confine.
_SCOPE_SETTINGS = (
    ("user_id", "BRAIN_USER_ID", "user"),
    ("namespace", "BRAIN_NAMESPACE", "namespace"),
    ("session_id", "BRAIN_SESSION_ID", "session"),
)


def resolve_scope(
    config: ProxyConfig, identity: identity_pb2.WhoAmIResponse
) -> tuple[ProxyConfig, list[str]]:
    """The config with unset scope fields taken from the key's confinement where it allows
    exactly one value, and a sentence for each field that still does not fit the key.

    The server would refuse every call with such a scope, so saying which setting is wrong,
    once and at start, replaces a PERMISSION_DENIED on every call.
    """
    confined = identity.confinement
    allowed = {
        "user_id": [confined.user_id] if confined.user_id else [],
        "namespace": list(confined.namespaces),
        "session_id": [confined.session_id] if confined.session_id else [],
    }
    taken: dict[str, str] = {}
    problems: list[str] = []
    for field, setting, noun in _SCOPE_SETTINGS:
        values, mine = allowed[field], getattr(config, field)
        if not values:
            continue
        listed = ", ".join(repr(v) for v in values)
        if not mine and len(values) == 1:
            taken[field] = values[0]
        elif not mine:
            problems.append(
                f"{setting} is unset, but this key is confined to {noun}s {listed}: "
                f"set {setting} to one of them"
            )
        elif mine not in values:
            fix = (
                f"set it to {values[0]!r} or unset it"
                if len(values) == 1
                else "set it to one of them"
            )
            problems.append(
                f"{setting} is {mine!r}, but this key is confined to {noun} {listed}: {fix}"
            )
    resolved = replace(
        config,
        user_id=taken.get("user_id", config.user_id),
        namespace=taken.get("namespace", config.namespace),
        session_id=taken.get("session_id", config.session_id),
    )
    return resolved, problems


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


def _check_arguments(tool: ToolSpec, args: Mapping[str, Any]) -> None:
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

# The server's fused score is a weighted sum of min-max normalised lanes (keywords 0.6, exact
# words 0.2, meaning 0.4) plus boosts of at most 0.03 (see server/retrieval.py); dividing by
# that maximum gives a 0..1 relevance a model can compare with `min_score`.
_MAX_FUSED_SCORE = 1.23


def relevance(score: float) -> float:
    """The server's fused score as 0..1: 1 = first by keywords, exact words and meaning."""
    return round(min(1.0, max(0.0, score / _MAX_FUSED_SCORE)), 3)


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
    "description": "Relevance 0..1 within this query: 1 = ranked first by keywords, exact words "
    "and meaning at once; a top keyword-only match is about 0.65.",
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
    # A fresh idempotency key makes the save safe to retry across a server restart.
    response = await client.save(
        _text(args, "content", required=True),
        supersedes=_strings(args, "supersedes"),
        idempotency_key=f"mcp-{uuid.uuid4().hex}",
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
    min_score = _number(args, "min_score") or 0.0
    response = await client.search(query, limit=limit, filter=_filter(args), time=_time(args))
    kept = [h for h in response.hits if relevance(h.score) >= min_score]
    hits = [
        {
            "id": h.memory.id,
            "score": relevance(h.score),
            "matched_by": [
                lane
                for lane, rank in (("keywords", h.lexical_rank), ("meaning", h.semantic_rank))
                if rank
            ],
            "memory": memory_json(h.memory),
        }
        for h in kept
    ]
    if not hits:
        return "No memories found.", {"hits": []}
    lines = [f"{len(hits)} memories, best first (score = relevance 0..1):"]
    lines += [
        f"{i}. score {relevance(h.score):.2f} {_line(h.memory)}" for i, h in enumerate(kept, 1)
    ]
    return "\n".join(lines), {"hits": hits}


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
            idempotency_key=f"mcp-{uuid.uuid4().hex}",
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
        idempotency_key=f"mcp-{uuid.uuid4().hex}",
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


async def _build_context(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    response = await client.build_context(
        _text(args, "query", required=True),
        token_budget=_integer(args, "token_budget", low=1, high=100_000, default=0),
    )
    items = [{"id": i.id, "score": relevance(i.score), "tokens": i.tokens} for i in response.items]
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
        "active memories, best first, each with a relevance score from 0 to 1 (1 = first by "
        "keywords and meaning at once; scores compare hits of one query, not across queries). "
        "Filter by kind, tags, or time (valid_at: facts true then; as_of: what was known then).",
        _schema(
            {
                "query": {"type": "string", "description": "What to look for, in plain words."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
                "min_score": {**_SCORE, "description": "Leave out hits below this relevance."},
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
                                "description": "Lanes that found it: keywords, meaning.",
                            },
                            "memory": _MEMORY_SCHEMA,
                        },
                        "required": ["id", "score", "matched_by", "memory"],
                    },
                }
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
)
_TOOLS_BY_NAME = {t.name: t for t in TOOLS}


# -- the MCP server ----------------------------------------------------------------------


class BrainProxy:
    """Holds the gRPC clients, the key's identity and the last outage; serves the MCP tools."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        # Sentences saying which setting does not fit the key; every tool call fails with them.
        self.problems: list[str] = []
        self._client: AsyncBrainClient | None = None
        self._probe: AsyncBrainClient | None = None
        self._identity: identity_pb2.WhoAmIResponse | None = None
        # (monotonic time, status name, message for the model) of the last failure to reach
        # the server; calls are answered from it until `recheck_after` has passed.
        self._outage: tuple[float, str, str] | None = None

    @property
    def client(self) -> AsyncBrainClient:
        # Created on first use so the channel binds to the running event loop, and only after
        # WhoAmI has answered, so it stamps the resolved scope.
        if self._client is None:
            self._client = AsyncBrainClient(
                self.config.target,
                self.config.api_key,
                timeout=self.config.timeout,
                retry=_TOOL_RETRY,
                **self.config.client_options(),
            )
        return self._client

    def _probe_client(self) -> AsyncBrainClient:
        # WhoAmI goes out with an empty scope: the configured scope may be what is wrong.
        if self._probe is None:
            options = {**self.config.client_options(), "scope": None}
            self._probe = AsyncBrainClient(
                self.config.target,
                self.config.api_key,
                timeout=_IDENTITY_TIMEOUT,
                retry=RetryPolicy(max_attempts=1),
                **options,
            )
        return self._probe

    async def close(self) -> None:
        for client in (self._client, self._probe):
            if client is not None:
                await client.close()

    def remembered_outage(self) -> str | None:
        """The error to answer with while a recent failure to reach the server is remembered."""
        if self._outage is None:
            return None
        when, _, message = self._outage
        return message if time.monotonic() - when < self.config.recheck_after else None

    def _went_down(self, exc: BrainClientError) -> str:
        c = self.config
        if exc.code_name == "UNAUTHENTICATED":
            message = (
                f"UNAUTHENTICATED: brain-server at {c.target} refused BRAIN_API_KEY (unknown, "
                "revoked or expired key): set it to a valid key (`brain-admin keys create`) "
                "and restart brain-mcp"
            )
        else:
            message = (
                f"{exc.code_name}: brain-server at {c.target} cannot be reached "
                f"({exc.message}); brain-mcp asks again in {c.recheck_after:g} s"
            )
        if self._outage is None or self._outage[1] != exc.code_name:
            _log.warning("%s", message)  # once per outage, not once per call
        self._outage = (time.monotonic(), exc.code_name, message)
        return message

    def _came_back(self) -> None:
        if self._outage is not None:
            _log.info("brain-server at %s answers again", self.config.target)
            self._outage = None

    async def identity(self) -> identity_pb2.WhoAmIResponse | None:
        """WhoAmI, cached once it answers; None while the server cannot be reached (asked
        again only after `recheck_after` seconds, so a downed server fails calls at once)."""
        if self._identity is not None or self.remembered_outage() is not None:
            return self._identity
        _log.debug("asking WhoAmI at %s", self.config.target)
        try:
            identity = await self._probe_client().whoami(
                timeout=min(self.config.timeout, _IDENTITY_TIMEOUT)
            )
        except BrainClientError as exc:
            self._went_down(exc)
            return None
        self._came_back()
        before = self.config.where()
        self.config, self.problems = resolve_scope(self.config, identity)
        if self.config.where() != before:
            _log.info("scope taken from the API key: %s", self.config.where())
        for problem in self.problems:
            _log.warning("configuration does not fit the API key: %s", problem)
        self._identity = identity
        return identity

    async def visible_tools(self) -> list[ToolSpec]:
        """The tools whose RPC the key may call (all of them while WhoAmI is unanswered)."""
        identity = await self.identity()
        if identity is None:
            return list(TOOLS)
        allowed = set(identity.allowed_methods)
        return [t for t in TOOLS if t.method in allowed]

    async def call(self, name: str, arguments: Mapping[str, Any]) -> tuple[bool, ToolOutput]:
        """Run one tool; returns (is_error, (text, structured)). Unknown names raise KeyError."""
        tool = _TOOLS_BY_NAME.get(name)
        if tool is None:
            raise KeyError(name)
        try:
            _check_arguments(tool, arguments)
            identity = await self.identity()
            if identity is not None and tool.method not in identity.allowed_methods:
                raise KeyError(name)
            if identity is None:  # the server did not answer WhoAmI, now or a moment ago
                _, code, message = self._outage or (0.0, "UNAVAILABLE", "UNAVAILABLE: no answer")
                return True, _error(code, message)
            if self.problems:
                return True, _error(
                    "PERMISSION_DENIED",
                    "PERMISSION_DENIED: brain-mcp's configuration does not fit its API key: "
                    + "; ".join(self.problems)
                    + ". Fix the MCP server's environment and restart it.",
                )
            if (outage := self.remembered_outage()) is not None:
                return True, _error("UNAVAILABLE", outage)
            output = await tool.run(self.client, arguments)
        except ToolInputError as exc:
            return True, _error("INVALID_ARGUMENT", f"INVALID_ARGUMENT: {exc}")
        except BrainClientError as exc:
            if exc.code_name == "UNAVAILABLE":
                self._went_down(exc)
            # The server's message, prefixed with the status so the model knows what to do.
            return True, _error(exc.code_name, str(exc))
        self._came_back()
        return False, output

    def instructions(self) -> str:
        text = (
            "Shared Brain: long-term memory shared by this team's people and agents. Recall "
            "before answering questions about earlier decisions, preferences or facts; remember "
            "durable, self-contained statements (not transient chatter); update or forget "
            "memories that are wrong. Recall scores are relevance from 0 to 1 within one query. "
            f"Every call acts in a scope fixed by configuration ({self.config.where()}); never "
            "pass user, namespace or tenant arguments."
        )
        if self.problems:
            return (
                "brain-mcp is MISCONFIGURED and every tool call fails until its environment is "
                f"fixed and it is restarted: {'; '.join(self.problems)}. Tell the user.\n\n{text}"
            )
        if self._identity is None and self._outage is not None:
            return (
                f"brain-server did not answer at start ({self._outage[2]}). Tools fail until "
                f"it does; brain-mcp keeps trying on its own.\n\n{text}"
            )
        return text

    def mcp_server(self) -> Server[Any]:
        """The low-level MCP server wired to this proxy."""
        import mcp_types as types
        from mcp.server.lowlevel import Server
        from mcp.shared.exceptions import MCPError

        async def tools_narrowed(ctx: Any, known_before: bool) -> None:
            # WhoAmI answered only now (the server was down at start): the host listed every
            # tool, so tell it the list changed to just what this key may call.
            if (
                not known_before
                and self._identity is not None
                and len(await self.visible_tools()) < len(TOOLS)
            ):
                with contextlib.suppress(Exception):  # a host that ignores it loses nothing
                    await ctx.session.send_tool_list_changed()

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            known_before = self._identity is not None
            tools = [_mcp_tool(t) for t in await self.visible_tools()]
            # A client may have cached the earlier, longer list (the SDK fetches it to check
            # tool output), so say it changed even when this answer already narrows it.
            await tools_narrowed(ctx, known_before)
            return types.ListToolsResult(tools=tools)

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            known_before = self._identity is not None
            try:
                is_error, (text, structured) = await self.call(params.name, params.arguments or {})
            except KeyError:
                await tools_narrowed(ctx, known_before)
                raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}") from None
            await tools_narrowed(ctx, known_before)
            return types.CallToolResult(
                content=[types.TextContent(text=text)],
                structured_content=structured,
                is_error=is_error,
            )

        return Server(
            "shared-brain",
            version="0.1.0",
            instructions=self.instructions(),
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )


def _error(code: str, message: str) -> ToolOutput:
    return message, {"error": code, "message": message}


def _mcp_tool(spec: ToolSpec) -> mcp_types.Tool:
    import mcp_types as types

    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
        annotations=types.ToolAnnotations(
            title=spec.title,
            read_only_hint=spec.read_only,
            destructive_hint=spec.destructive,
            open_world_hint=False,
        ),
    )


async def serve(config: ProxyConfig) -> None:
    """Serve MCP on stdin/stdout until the host closes stdin."""
    from mcp.server.lowlevel.server import NotificationOptions
    from mcp.server.stdio import stdio_server

    proxy = BrainProxy(config)
    try:
        await proxy.identity()  # failure is fine: asked again on the first request
        server = proxy.mcp_server()
        async with stdio_server() as (read_stream, write_stream):
            options = server.create_initialization_options(
                notification_options=NotificationOptions(tools_changed=True)
            )
            await server.run(read_stream, write_stream, options)
    finally:
        await proxy.close()


# -- the prompt-submit hook --------------------------------------------------------------


def _hook_scope(config: ProxyConfig, timeout: float) -> tuple[ProxyConfig, list[str]]:
    """The scope the tools would act in: WhoAmI with an empty scope, then `resolve_scope`."""
    with BrainClient(
        config.target,
        config.api_key,
        timeout=timeout,
        retry=RetryPolicy(max_attempts=1),
        **{**config.client_options(), "scope": None},
    ) as probe:
        return resolve_scope(config, probe.whoami())


def hook_recall(config: ProxyConfig, stdin: str, env: Mapping[str, str]) -> str:
    """The context block for the hook payload's prompt; "" when there is nothing to add.

    Fails silent: a recall hook must never get in the way of the user's prompt, so a bad
    payload, a missing key, an unreachable server or a refused call all yield "".
    """
    try:
        payload = json.loads(stdin) if stdin.strip() else {}
        prompt = payload.get("prompt") if isinstance(payload, dict) else None
        timeout = float(env.get("BRAIN_HOOK_TIMEOUT") or 2.0)
        budget = int(env.get("BRAIN_HOOK_TOKEN_BUDGET") or 0)
    except ValueError as exc:
        _log.debug("hook recall: unreadable input: %s", exc)
        return ""
    if not isinstance(prompt, str) or not prompt.strip() or not config.api_key:
        return ""
    deadline = time.monotonic() + timeout
    try:
        config, problems = _hook_scope(config, timeout)
        if problems:
            _log.debug("hook recall: configuration does not fit the key: %s", problems)
            return ""
        with BrainClient(
            config.target,
            config.api_key,
            timeout=max(0.05, deadline - time.monotonic()),
            retry=RetryPolicy(max_attempts=1),
            **config.client_options(),
        ) as client:
            return client.build_context(prompt, token_budget=budget).context
    except (BrainClientError, OSError, ValueError) as exc:
        _log.debug("hook recall: no context: %s", exc)
        return ""


def hook_capture(config: ProxyConfig, stdin: str, env: Mapping[str, str]) -> str:
    """Propose the session's remember-this moments for review; returns a line for stderr.

    Never raises: a stop hook must not get in the agent's way, so every failure becomes the
    returned line ("" when there was nothing to propose).
    """
    try:
        payload = json.loads(stdin) if stdin.strip() else {}
    except ValueError:
        return "hook capture: the payload on stdin is not JSON"
    path = payload.get("transcript_path") if isinstance(payload, dict) else None
    if not isinstance(path, str) or not path:
        return "hook capture: the payload names no transcript_path"
    if not config.api_key:
        return "hook capture: set BRAIN_API_KEY"
    session = str(payload.get("session_id") or "")
    try:
        turns = read_transcript(Path(path).expanduser())
    except CaptureError as exc:
        return f"hook capture: {exc}"
    try:
        extracted = extract_facts(turns, env)
    except CaptureError as exc:  # the explicit requests are still worth proposing
        _log.warning("hook capture: %s", exc)
        extracted = []
    todo = proposals(
        session, explicit_requests(turns), extracted, env.get("BRAIN_CAPTURE_MODEL", "")
    )
    if not todo:
        return ""
    ids: list[str] = []
    refused: list[str] = []
    try:
        config, problems = _hook_scope(config, config.timeout)
        if problems:
            return "hook capture: configuration does not fit the API key: " + "; ".join(problems)
        with BrainClient(
            config.target, config.api_key, timeout=config.timeout, **config.client_options()
        ) as client:
            for p in todo:
                try:
                    response = client.propose(
                        p.content,
                        reason=p.reason,
                        idempotency_key=p.idempotency_key,
                        tags=list(p.tags),
                    )
                except (FailedPrecondition, InvalidArgument, RateLimited) as exc:
                    refused.append(str(exc))  # this one only (e.g. a tombstoned value)
                    continue
                ids.append(response.candidate.id)
    except (BrainClientError, OSError, ValueError) as exc:
        refused.append(str(exc))
    line = f"hook capture: proposed {len(ids)} of {len(todo)} memories for review"
    return line + (f" ({'; '.join(ids)})" if ids else "") + "".join(f"; {r}" for r in refused)


# -- command line ------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="brain-mcp",
        description="Stdio MCP server (and prompt hook) for Shared Brain. "
        "Configuration comes from BRAIN_* environment variables; flags override them.",
    )
    p.add_argument("--target", help="host:port of brain-server [BRAIN_TARGET]")
    p.add_argument(
        "--api-key", help="API key [BRAIN_API_KEY]; prefer the variable (flags show in ps)"
    )
    p.add_argument("--user-id", help="scope user [BRAIN_USER_ID]")
    p.add_argument("--namespace", help="scope namespace [BRAIN_NAMESPACE]")
    p.add_argument("--session-id", help="scope session [BRAIN_SESSION_ID]")
    p.add_argument("--tls-ca", help="PEM root CA file; enables TLS [BRAIN_TLS_CA]")
    sub = p.add_subparsers(dest="command")
    hook = sub.add_parser("hook", help="run as a coding-agent hook")
    hook.add_argument(
        "hook",
        choices=["recall", "capture"],
        help="recall: print context for the prompt; capture: propose the session's "
        '"remember this" moments for review',
    )
    return p


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `brain-mcp` console script."""
    args = _parser().parse_args(argv)
    env = os.environ
    config = ProxyConfig.from_args(args, env)
    debug = env.get("BRAIN_MCP_DEBUG", "") not in {"", "0"}
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if debug else logging.WARNING,
        format="brain-mcp %(levelname)s %(message)s",
    )
    if args.command == "hook" and args.hook == "capture":
        if said := hook_capture(config, sys.stdin.read(), env):
            sys.stderr.write(said + "\n")
        return
    if args.command == "hook":
        context = hook_recall(config, sys.stdin.read(), env)
        if context:
            sys.stdout.write(context.rstrip("\n") + "\n")
        return
    if not config.api_key:
        sys.exit("brain-mcp: set BRAIN_API_KEY to an API key (mint one with `brain-admin keys`)")
    asyncio.run(serve(config))


if __name__ == "__main__":
    main()
