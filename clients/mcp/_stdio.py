"""The read side of brain-mcp's stdio transport: the SDK's stream of parsed messages, with a
second reading for the lines its JSON parser refuses but Python's `json` reads.

The MCP SDK parses each line with pydantic's JSON parser, which refuses a string escape of
half a surrogate pair (``"x \\ud800"``, valid JSON that Python's `json` reads); it then has
no request id to answer, so the host waits forever. Read again here, the request reaches its
tool, and `refuse_invalid_text` answers it with a tool error naming the argument.
"""

from __future__ import annotations

import contextvars
import json
from types import TracebackType
from typing import Any, Self

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

__all__ = ["RereadingStream"]


class RereadingStream:
    """Wraps the SDK's read stream; a line refused as invalid JSON is parsed again with
    Python's `json` (no NaN or Infinity) and, if that reads a JSON-RPC message, delivered."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @property
    def last_context(self) -> contextvars.Context | None:
        # The dispatcher reads the sender's context from the stream after each item.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        return _reread(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _reread(item: SessionMessage | Exception) -> SessionMessage | Exception:
    """The message in a line the SDK refused as invalid JSON, or the SDK's error as it was."""
    if not isinstance(item, ValidationError):
        return item
    errors = item.errors()
    if len(errors) != 1 or errors[0]["type"] != "json_invalid":
        return item
    line = errors[0].get("input")  # the whole line, as the SDK read it
    if not isinstance(line, str):
        return item
    try:
        data = json.loads(line, parse_constant=_no_constant)
        message = types.jsonrpc_message_adapter.validate_python(data, by_name=False)
    except ValueError:  # not JSON for Python either (json.JSONDecodeError, ValidationError)
        return item
    return SessionMessage(message)
