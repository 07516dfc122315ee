"""Domain errors to gRPC status codes: the one place this translation happens."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog

from brain.authz import current_caller
from brain.authz._grpc_types import Ctx
from brain.server import errors

_log = structlog.get_logger("brain.rpc")

STATUS_OF: dict[type[errors.BrainError], grpc.StatusCode] = {
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    errors.FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    errors.AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.Conflict: grpc.StatusCode.ABORTED,
    errors.ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
    errors.NotImplementedYet: grpc.StatusCode.UNIMPLEMENTED,
}

R = TypeVar("R")


def status_code(exc: errors.BrainError) -> grpc.StatusCode:
    for cls in type(exc).__mro__:
        if cls in STATUS_OF:
            return STATUS_OF[cls]
    return grpc.StatusCode.INTERNAL


def timeout_ms(context: Ctx) -> int | None:
    """The caller's remaining deadline, to bound database statements."""
    remaining = context.time_remaining()
    if remaining is None:
        return None
    return max(1, int(remaining * 1000))


def unary(
    fn: Callable[[Any, Any, Ctx], Awaitable[R]],
) -> Callable[[Any, Any, Ctx], Awaitable[R]]:
    """Translate BrainError raised by a unary handler into its status."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: Ctx) -> R:
        try:
            return await fn(self, request, context)
        except errors.BrainError as exc:
            await context.abort(status_code(exc), exc.message)
            raise AssertionError("unreachable") from exc
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # a bug: log it whole, tell the caller nothing internal
            await _internal(context, exc)
            raise AssertionError("unreachable") from exc

    return wrapper


def streaming(
    fn: Callable[[Any, Any, Ctx], AsyncIterator[R]],
) -> Callable[[Any, Any, Ctx], AsyncIterator[R]]:
    """Translate BrainError raised by a server-streaming handler into its status."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: Ctx) -> AsyncIterator[R]:
        try:
            async for item in fn(self, request, context):
                yield item
        except errors.BrainError as exc:
            await context.abort(status_code(exc), exc.message)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # a bug: log it whole, tell the caller nothing internal
            await _internal(context, exc)

    return wrapper


async def _internal(context: Ctx, exc: Exception) -> None:
    c = current_caller.get()
    request_id = c.request_id if c is not None else ""
    _log.error("unhandled error", request_id=request_id, exc_info=exc)
    await context.abort(
        grpc.StatusCode.INTERNAL, f"internal error (request id {request_id}); see server logs"
    )


def not_yet(what: str, issue: int) -> errors.NotImplementedYet:
    return errors.NotImplementedYet(f"{what} is not implemented yet (planned in issue #{issue})")
