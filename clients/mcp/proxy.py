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
    BRAIN_RESTART_WINDOW    seconds after a lost connection during which tool calls wait for
                            the server to come back, within BRAIN_TIMEOUT (default 6)
    BRAIN_HOOK_TIMEOUT      deadline of `hook recall` (default 2)
    BRAIN_HOOK_TOKEN_BUDGET token budget of `hook recall` (default: the server's)

Each tool maps to one typed RPC; there is no generic pass-through. At start the proxy asks
WhoAmI with an empty scope, checks the configured scope against the key's confinement (taking
unset fields from the key where it allows exactly one value), reports what is wrong on stderr
and in the server instructions, and lists only the tools whose RPC the key may call. Restarts
follow the clients' rule (`brain.clients._base`): for BRAIN_RESTART_WINDOW seconds after a
working connection is lost, tool calls wait for the server; outside that window a server that
cannot be reached fails a call within a second, and every call asks the channel again, so the
first call after the server is back uses it. One warning per outage, one note when it is back.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from brain.clients import AsyncBrainClient, BrainClient, RetryPolicy, Scope
from brain.clients._base import RESTART_WINDOW
from brain.clients.errors import BrainClientError, FailedPrecondition, InvalidArgument, RateLimited
from brain.clients.mcp.tools import (
    TOOLS,
    TOOLS_BY_NAME,
    ToolInputError,
    ToolOutput,
    ToolSpec,
    check_arguments,
)
from brain.v1 import common_pb2, identity_pb2

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.lowlevel import Server

__all__ = ["TOOLS", "BrainProxy", "ProxyConfig", "main", "resolve_scope"]

_log = logging.getLogger("brain.mcp")

DEFAULT_TARGET = "127.0.0.1:50051"
# WhoAmI at start must not hold up the host's handshake for long when the server is down.
_IDENTITY_TIMEOUT = 3.0
# Waiting out a restart is the restart window's job (it does not count attempts); these retries
# are for an UNAVAILABLE the server itself answered (its database is down), kept short so a
# tool call fails in well under a second instead of after the client's default backoff.
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
    restart_window: float = RESTART_WINDOW

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
            restart_window=float(env.get("BRAIN_RESTART_WINDOW") or RESTART_WINDOW),
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
            "restart_window": self.restart_window,
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


# -- the MCP server ----------------------------------------------------------------------


class BrainProxy:
    """Holds the gRPC clients, the key's identity and the current outage; serves the MCP tools.

    The outage is remembered only to warn once per outage and to answer calls made before
    WhoAmI ever answered; it never refuses a call: every call goes to the client, whose channel
    knows whether the server is back (see the restart rule in `brain.clients._base`).
    """

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        # Sentences saying which setting does not fit the key; every tool call fails with them.
        self.problems: list[str] = []
        self._client: AsyncBrainClient | None = None
        self._probe: AsyncBrainClient | None = None
        self._identity: identity_pb2.WhoAmIResponse | None = None
        # (monotonic time, status name, message for the model) of the last failure to reach
        # the server, until a call gets through again.
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
                f"({exc.message}); brain-mcp asks again on the next call"
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
        again by the next call; the probe's channel bounds how long that takes)."""
        if self._identity is not None:
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
        tool = TOOLS_BY_NAME.get(name)
        if tool is None:
            raise KeyError(name)
        try:
            check_arguments(tool, arguments)
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
            output = await tool.run(self.client, arguments)
        except ToolInputError as exc:
            return True, _error("INVALID_ARGUMENT", f"INVALID_ARGUMENT: {exc}")
        except BrainClientError as exc:
            if exc.code_name == "UNAVAILABLE":  # says which server, and that it is asked again
                return True, _error(exc.code_name, self._went_down(exc))
            # The server's message, prefixed with the status so the model knows what to do.
            return True, _error(exc.code_name, str(exc))
        self._came_back()
        return False, output

    def instructions(self) -> str:
        text = (
            "Shared Brain: long-term memory shared by this team's people and agents. Recall "
            "before answering questions about earlier decisions, preferences or facts; remember "
            "durable, self-contained statements (not transient chatter); update or forget "
            "memories that are wrong. Recall scores are relevance from 0 to 1, comparable across "
            "queries; recall answers nothing (silenced) when no memory is relevant enough. "
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
    # Imported here so that the recall hook, which runs before every prompt, does not pay it.
    from brain.clients.mcp.capture import (
        CaptureError,
        explicit_requests,
        extract_facts,
        proposals,
        read_transcript,
    )

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
