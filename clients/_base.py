"""What the sync and asyncio clients share: configuration, TLS, retries and deadlines."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc
import grpc.aio

from brain.clients._requests import (
    Requests,
)
from brain.clients.errors import BrainClientError, from_rpc_error, rpc_status
from brain.v1 import (
    common_pb2,
    memory_pb2,
)

DEFAULT_TIMEOUT = 10.0


# Reconnect quickly after a server restart instead of gRPC's 1 s .. 120 s default backoff.
_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.primary_user_agent", "shared-brain-client/0.1"),
)


Req = TypeVar("Req")


Resp = TypeVar("Resp")


Item = TypeVar("Item")


def is_position_marker(item: Any) -> bool:
    """The message that opens a Watch stream: a cursor, no change (the iterators skip it)."""
    return isinstance(item, memory_pb2.WatchMemoriesResponse) and not item.HasField("memory")


_RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for idempotent calls that fail with UNAVAILABLE or DEADLINE_EXCEEDED.

    Attempt n (1-based) waits `min(max_backoff, initial_backoff * multiplier**(n-1))`, scaled by
    a random factor in `[1 - jitter, 1]`, before attempt n+1. `max_attempts=1` disables retries.
    `attempt_timeout` bounds one attempt of a unary call (None: it may use all the time left of
    the call's deadline); set it below the deadline so a call that hangs is tried again in time.
    """

    max_attempts: int = 6
    initial_backoff: float = 0.2
    max_backoff: float = 3.0
    multiplier: float = 2.0
    jitter: float = 0.5
    attempt_timeout: float | None = None

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        return base * (1.0 - self.jitter * random.random())


def failed(exc: grpc.RpcError, method: str, request: Any) -> BrainClientError:
    """The client error for a call that will not be retried, naming its idempotency key."""
    error = from_rpc_error(exc, method)
    error.idempotency_key = getattr(request, "idempotency_key", "")
    return error


def read_pem(value: bytes | str | Path | None) -> bytes | None:
    """PEM bytes as given, PEM text, or the contents of a file path."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str) and value.lstrip().startswith("-----BEGIN"):
        return value.encode()
    return Path(value).expanduser().read_bytes()


def credentials(
    tls: bool,
    root_certificates: bytes | str | Path | None,
    certificate_chain: bytes | str | Path | None,
    private_key: bytes | str | Path | None,
) -> grpc.ChannelCredentials | None:
    if (certificate_chain is None) != (private_key is None):
        raise ValueError("mTLS needs both certificate_chain and private_key, or neither")
    if not (tls or root_certificates is not None or certificate_chain is not None):
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=read_pem(root_certificates),
        private_key=read_pem(private_key),
        certificate_chain=read_pem(certificate_chain),
    )


class Paged(Protocol):
    page_token: str


class PageOf(Protocol):
    next_page_token: str


class Resumable(Protocol):
    cursor: str


class ClientBase:
    """Configuration shared by the sync and asyncio clients."""

    def __init__(
        self,
        target: str,
        api_key: str,
        *,
        scope: common_pb2.Scope | None,
        timeout: float,
        retry: RetryPolicy | None,
    ) -> None:
        if not api_key:
            raise ValueError("api_key is empty; mint one with `brain-admin keys create`")
        self.target = target
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._scope = common_pb2.Scope()
        if scope is not None:
            self._scope.CopyFrom(scope)
        self._requests = Requests(self._scope)
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {api_key}"),)

    @property
    def scope(self) -> common_pb2.Scope:
        """A copy of the scope stamped on every request."""
        copy = common_pb2.Scope()
        copy.CopyFrom(self._scope)
        return copy

    def _deadline(self, timeout: float | None, default: float | None) -> float | None:
        seconds = default if timeout is None else timeout
        return None if seconds is None else time.monotonic() + seconds

    def _remaining(self, deadline: float | None) -> float | None:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _attempt_timeout(self, deadline: float | None) -> float | None:
        """The deadline of the next attempt of a unary call."""
        remaining = self._remaining(deadline)
        limit = self.retry.attempt_timeout
        if limit is None or (remaining is not None and remaining < limit):
            return remaining
        return limit

    def _retry_delay(
        self, exc: grpc.RpcError, attempt: int, deadline: float | None, idempotent: bool
    ) -> float | None:
        """Seconds to wait before retrying, or None when the error must be raised."""
        if not idempotent or rpc_status(exc) not in _RETRYABLE:
            return None
        if attempt >= self.retry.max_attempts:
            return None
        delay = self.retry.backoff(attempt)
        remaining = self._remaining(deadline)
        if remaining is not None and remaining <= delay:
            return None
        return delay
