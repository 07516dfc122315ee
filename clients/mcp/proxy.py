"""The MCP server of brain-mcp: `BrainProxy` serves the tools of `tools.TOOLS` over stdio and
forwards each call to its typed RPC.

Each tool maps to one typed RPC; there is no generic pass-through. At start the proxy asks
WhoAmI with an empty scope, checks the configured scope against the key's confinement (taking
unset fields from the key where it allows exactly one value), reports what is wrong on stderr
and in the server instructions, and lists only the tools whose RPC the key may call. Restarts
follow the clients' rule (`brain.clients._base`): for BRAIN_RESTART_WINDOW seconds after a
working connection is lost, tool calls wait for the server; outside that window a server that
cannot be reached fails a call within a second, and every call asks the channel again, so the
first call after the server is back uses it. One warning per outage, one note when it is back.
gRPC failures become MCP tool errors carrying the server's message. A line the SDK's JSON
parser refuses but Python's reads (a lone surrogate escape) is read again (`_stdio`), so its
tool answers it instead of the request going unanswered.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from brain.clients import AsyncBrainClient, RetryPolicy
from brain.clients.errors import BrainClientError
from brain.clients.mcp.config import ProxyConfig, resolve_scope
from brain.clients.mcp.tools import (
    TOOLS,
    TOOLS_BY_NAME,
    ToolInputError,
    ToolOutput,
    ToolSpec,
    check_arguments,
)
from brain.v1 import identity_pb2

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.lowlevel import Server

__all__ = ["BrainProxy", "serve"]

_log = logging.getLogger("brain.mcp")

# WhoAmI at start must not hold up the host's handshake for long when the server is down.
_IDENTITY_TIMEOUT = 3.0
# Waiting out a restart is the restart window's job (it does not count attempts); these retries
# are for an UNAVAILABLE the server itself answered (its database is down), kept short so a
# tool call fails in well under a second instead of after the client's default backoff.
_TOOL_RETRY = RetryPolicy(max_attempts=3, initial_backoff=0.1, max_backoff=0.3)


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
            # stderr says so, as it said the outage (brain-mcp logs warnings and up).
            _log.warning("brain-server at %s answers again", self.config.target)
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
                if params.name in TOOLS_BY_NAME:  # a tool the key's permissions leave out
                    raise MCPError(
                        types.INVALID_PARAMS,
                        f"tool {params.name!r} is not available to this API key (its "
                        "permissions do not include the call); the tool list was narrowed "
                        "to what it may call (tools/list_changed)",
                    ) from None
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

    from brain.clients.mcp._stdio import RereadingStream

    proxy = BrainProxy(config)
    try:
        await proxy.identity()  # failure is fine: asked again on the first request
        server = proxy.mcp_server()
        async with stdio_server() as (read_stream, write_stream):
            options = server.create_initialization_options(
                notification_options=NotificationOptions(tools_changed=True)
            )
            await server.run(RereadingStream(read_stream), write_stream, options)
    finally:
        await proxy.close()
