"""brain-mcp: a stdio MCP server that forwards typed tools to the Shared Brain gRPC API.

    brain-mcp                 serve MCP over stdin/stdout (what an MCP host launches)
    brain-mcp hook recall     prompt-submit hook: print a context block for the prompt on stdin

Where to connect, which key to use and which bucket to act in come only from the environment
(or the flags that override it), never from the model, so what an agent saves and what it
recalls share one scope by construction:

    BRAIN_TARGET      host:port of brain-server (default 127.0.0.1:50051)
    BRAIN_API_KEY     the agent's API key (required)
    BRAIN_USER_ID     scope.user_id stamped on every call (empty: shared with the team)
    BRAIN_NAMESPACE   scope.namespace
    BRAIN_SESSION_ID  scope.session_id (optional)
    BRAIN_TLS_CA      path to a PEM root CA; turns TLS on (BRAIN_TLS=1 uses the system roots;
                      BRAIN_TLS_CERT + BRAIN_TLS_KEY add a client certificate for mTLS)
    BRAIN_TIMEOUT     per-call deadline in seconds for tools (default 10)
    BRAIN_HOOK_TIMEOUT      deadline of `hook recall` (default 2)
    BRAIN_HOOK_TOKEN_BUDGET token budget of `hook recall` (default: the server's)

Each tool maps to one typed RPC; there is no generic pass-through. At start the proxy asks
WhoAmI and lists only the tools whose RPC the key may call; if the server cannot be reached
then, it lists every tool and asks again on the next request. gRPC failures become MCP tool
errors carrying the server's message; the gRPC channel reconnects by itself after a restart.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from brain.v1 import common_pb2, identity_pb2, memory_pb2

from .client import AsyncBrainClient, BrainClient, DraftFields, RetryPolicy, Scope
from .errors import BrainClientError

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.lowlevel import Server

__all__ = ["TOOLS", "BrainProxy", "ProxyConfig", "main"]

_log = logging.getLogger("brain.mcp")

DEFAULT_TARGET = "127.0.0.1:50051"
# WhoAmI at start must not hold up the host's handshake for long when the server is down.
_IDENTITY_TIMEOUT = 3.0


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
        )

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments shared by `BrainClient` and `AsyncBrainClient`."""
        return {
            "scope": self.scope,
            "tls": self.tls,
            "root_certificates": self.tls_ca,
            "certificate_chain": self.tls_cert,
            "private_key": self.tls_key,
        }


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


# -- rendering ---------------------------------------------------------------------------


def _iso(ts: Any) -> str | None:
    if not ts.seconds and not ts.nanos:
        return None
    return str(ts.ToDatetime(tzinfo=UTC).isoformat().replace("+00:00", "Z"))


def _status(value: int) -> str:
    name = common_pb2.MemoryStatus.Name(value)  # type: ignore[arg-type]
    return str(name).removeprefix("MEMORY_STATUS_").lower()


def memory_json(m: common_pb2.Memory) -> dict[str, Any]:
    """The fields of a memory an agent can act on, as JSON-ready values."""
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
    return f"[{m.id}] ({_status(m.status)}, {m.kind or 'note'}{extra}) {m.content}"


# -- tools -------------------------------------------------------------------------------

ToolOutput = tuple[str, dict[str, Any]]
ToolRun = Callable[[AsyncBrainClient, Mapping[str, Any]], Awaitable[ToolOutput]]


@dataclass(frozen=True)
class ToolSpec:
    """One MCP tool and the typed RPC it forwards to."""

    name: str
    method: str
    description: str
    input_schema: dict[str, Any]
    run: ToolRun
    read_only: bool = False
    destructive: bool = False


_ID = {"type": "string", "description": "A memory id, as returned by remember or recall."}
_STRINGS = {"type": "array", "items": {"type": "string"}}
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
    response = await client.search(query, limit=limit)
    hits = [
        {"id": h.memory.id, "score": round(h.score, 4), "memory": memory_json(h.memory)}
        for h in response.hits
    ]
    if not hits:
        return "No memories found.", {"hits": []}
    lines = [f"{len(hits)} memories, best first:"]
    lines += [f"{i}. score {h.score:.3f} {_line(h.memory)}" for i, h in enumerate(response.hits, 1)]
    return "\n".join(lines), {"hits": hits}


async def _get_memory(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    m = (await client.get(_text(args, "id", required=True))).memory
    return json.dumps(memory_json(m), indent=2), {"memory": memory_json(m)}


async def _memory_history(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
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


async def _build_context(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    response = await client.build_context(
        _text(args, "query", required=True),
        token_budget=_integer(args, "token_budget", low=1, high=100_000, default=0),
    )
    items = [{"id": i.id, "score": round(i.score, 4), "tokens": i.tokens} for i in response.items]
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

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "remember",
        _MEMORY + "SaveMemory",
        "Save a durable fact, preference or decision to the shared long-term memory. Write one "
        "self-contained statement. To correct an older memory, pass its id in `supersedes`. "
        "The result includes the new memory id.",
        _schema(_DRAFT_PROPERTIES, ["content"]),
        _remember,
    ),
    ToolSpec(
        "recall",
        _MEMORY + "SearchMemories",
        "Search the shared long-term memory (keyword + semantic). Returns the best matching "
        "active memories with their ids and relevance scores, best first.",
        _schema(
            {
                "query": {"type": "string", "description": "What to look for, in plain words."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            },
            ["query"],
        ),
        _recall,
        read_only=True,
    ),
    ToolSpec(
        "get_memory",
        _MEMORY + "GetMemory",
        "Read one memory by id, with its status, validity period and provenance.",
        _schema({"id": _ID}, ["id"]),
        _get_memory,
        read_only=True,
    ),
    ToolSpec(
        "memory_history",
        _MEMORY + "GetMemoryHistory",
        "List every version of one memory, oldest first: who changed it, when, and how.",
        _schema({"id": _ID}, ["id"]),
        _memory_history,
        read_only=True,
    ),
    ToolSpec(
        "forget",
        _MEMORY + "ForgetMemory",
        "Erase a memory that is wrong or must not be kept. Its content is deleted in every "
        "version and the same statement cannot be saved again in this scope. Give a reason.",
        _schema(
            {"id": _ID, "reason": {"type": "string", "description": "Why it is forgotten."}},
            ["id", "reason"],
        ),
        _forget,
        destructive=True,
    ),
    ToolSpec(
        "propose_memory",
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
        _propose_memory,
    ),
    ToolSpec(
        "list_candidates",
        _REVIEW + "ListCandidates",
        "List proposed memories that are still waiting for review.",
        _schema(
            {
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
                "proposed_by": {"type": "string", "description": "Only this proposer's."},
            }
        ),
        _list_candidates,
        read_only=True,
    ),
    ToolSpec(
        "build_context",
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
        _build_context,
        read_only=True,
    ),
)
_TOOLS_BY_NAME = {t.name: t for t in TOOLS}


# -- the MCP server ----------------------------------------------------------------------


class BrainProxy:
    """Holds the gRPC client and the key's identity; serves tools/list and tools/call."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self._client: AsyncBrainClient | None = None
        self._identity: identity_pb2.WhoAmIResponse | None = None

    @property
    def client(self) -> AsyncBrainClient:
        # Created on first use so the channel binds to the running event loop.
        if self._client is None:
            self._client = AsyncBrainClient(
                self.config.target,
                self.config.api_key,
                timeout=self.config.timeout,
                **self.config.client_options(),
            )
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def identity(self) -> identity_pb2.WhoAmIResponse | None:
        """WhoAmI, cached once it succeeds; None (and asked again next time) while it fails."""
        if self._identity is None:
            try:
                timeout = min(self.config.timeout, _IDENTITY_TIMEOUT)
                self._identity = await self.client.whoami(timeout=timeout)
            except BrainClientError as exc:
                _log.warning("WhoAmI failed, listing every tool for now: %s", exc)
        return self._identity

    async def visible_tools(self) -> list[ToolSpec]:
        """The tools whose RPC the key may call (all of them while WhoAmI is unanswered)."""
        identity = await self.identity()
        if identity is None:
            return list(TOOLS)
        allowed = set(identity.allowed_methods)
        return [t for t in TOOLS if t.method in allowed]

    async def call(self, name: str, arguments: Mapping[str, Any]) -> tuple[bool, ToolOutput]:
        """Run one tool; returns (is_error, (text, structured)). Unknown names raise KeyError."""
        tool = next((t for t in await self.visible_tools() if t.name == name), None)
        if tool is None:
            raise KeyError(name)
        try:
            return False, await tool.run(self.client, arguments)
        except BrainClientError as exc:
            # The server's message, prefixed with the status so the model knows what to do.
            return True, (str(exc), {"error": exc.code_name, "message": exc.message})
        except ToolInputError as exc:
            return True, (f"INVALID_ARGUMENT: {exc}", {"error": "INVALID_ARGUMENT"})

    def instructions(self) -> str:
        c = self.config
        where = f"namespace {c.namespace or '(default)'}, user {c.user_id or '(shared)'}"
        if c.session_id:
            where += f", session {c.session_id}"
        return (
            "Shared Brain: long-term memory shared by this team's people and agents. Recall "
            "before answering questions about earlier decisions, preferences or facts; remember "
            "durable, self-contained statements (not transient chatter); use forget for memories "
            f"that are wrong. Every call acts in a scope fixed by configuration ({where})."
        )

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


def _mcp_tool(spec: ToolSpec) -> mcp_types.Tool:
    import mcp_types as types

    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.input_schema,
        annotations=types.ToolAnnotations(
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
    try:
        with BrainClient(
            config.target,
            config.api_key,
            timeout=timeout,
            retry=RetryPolicy(max_attempts=1),
            **config.client_options(),
        ) as client:
            return client.build_context(prompt, token_budget=budget).context
    except (BrainClientError, OSError, ValueError) as exc:
        _log.debug("hook recall: no context: %s", exc)
        return ""


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
    hook.add_argument("hook", choices=["recall"], help="recall: print context for the prompt")
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
