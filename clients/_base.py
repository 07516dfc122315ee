"""What the sync and asyncio clients share: configuration, TLS, retries and deadlines."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc
import grpc.aio

from brain.clients._requests import (
    Requests,
)
from brain.clients.errors import BrainClientError, from_rpc_error, retry_after, rpc_status
from brain.v1 import (
    common_pb2,
    memory_pb2,
)

DEFAULT_TIMEOUT = 10.0

# -- restarts ------------------------------------------------------------------------------
#
# The rule, for every attempt of every call (unary and stream, sync and asyncio):
#
# 1. The client watches its channel. When a connection that was READY is lost, a *restart
#    window* of `restart_window` seconds (default RESTART_WINDOW) opens; it closes early when
#    the channel is READY again.
# 2. An attempt is sent only once the channel is READY or the call has waited its turn:
#    inside a restart window the call waits for the channel until the window or its own
#    deadline ends (whichever is first); outside one (never connected, or the window has
#    passed) it waits at most UNREACHABLE_WAIT, which is longer than the longest gap between
#    the channel's connection attempts (reconnect backoff at most 0.4 s, +20% jitter) plus a
#    connection's handshake, so a server that is back is found by that call. An IDLE channel
#    outside a window is not waited for: the attempt itself starts a fresh connection attempt.
# 3. The attempt is sent fail-fast: if the channel is still not READY it fails at once with
#    gRPC's UNAVAILABLE ("failed to connect to all addresses; ... Connection refused"). Waiting
#    happens only before a request is sent, so a write never waits after it may have landed.
# 4. An UNAVAILABLE (or a CANCELLED from a server shutting down) while the channel is not READY
#    (the server cannot be reached) is retried, for idempotent calls only, while a restart
#    window is open (the retry waits as in 2); it is never retried outside one. The same codes
#    on a READY channel (the server answered, e.g. its database is down) and DEADLINE_EXCEEDED
#    follow `RetryPolicy` as before; non-idempotent calls are never sent twice.
# 5. A call refused by the key's rate limit (RESOURCE_EXHAUSTED with retry-after-ms) did not
#    run, so it may be sent again, a write too. A retry so refused waits as the server says
#    (the attempt that failed spent the tokens: a PutDocuments takes one per document); a
#    first attempt waits when the server's wait is at most `RetryPolicy.rate_limit_wait`
#    (1 s), within its deadline, else it raises RateLimited. A RESOURCE_EXHAUSTED without the
#    trailer (a quota, a full disk) raises QuotaExceeded: waiting will not help.
#
# 6. A stream that had delivered items and fails with the server unreachable opens a window
#    from that moment (`ConnectionWatch.stream_lost`), and resumes from its cursor within it.
#
# So a server stopped and back within the window (a restart of an embedded server with two
# workers took 7-14 s on a loaded 2-core machine; 15 s + one reconnect) costs no failed call
# whose deadline (DEFAULT_TIMEOUT unless given) lasts until then,
# and a server that stays down fails a call within UNREACHABLE_WAIT (< 1 s) once the window
# has passed, or at once when the channel never connected and its attempt is refused.
RESTART_WINDOW = 15.0
UNREACHABLE_WAIT = 0.8

# Reconnect quickly after a server restart instead of gRPC's 1 s .. 120 s default backoff; the
# cap (0.4 s, +20% jitter) must stay well below UNREACHABLE_WAIT (see the rule above).
_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 400),
    ("grpc.primary_user_agent", "shared-brain-client/0.1"),
)


class ConnectionWatch:
    """What the client knows of its channel: its state and when a READY connection was lost.

    Fed by the channel's connectivity notifications (a subscription for the sync client, a task
    for the asyncio one) and by the state read at call time; thread-safe.
    """

    def __init__(self, restart_window: float) -> None:
        if restart_window < 0:
            raise ValueError("restart_window must be >= 0 seconds")
        self.restart_window = restart_window
        self._lock = threading.Lock()
        self._state: grpc.ChannelConnectivity | None = None
        self._lost_at: float | None = None  # when the last READY connection was lost

    def observe(self, state: grpc.ChannelConnectivity) -> None:
        """Record the channel's state; leaving READY opens a restart window."""
        with self._lock:
            if state is grpc.ChannelConnectivity.READY:
                self._lost_at = None
            elif self._state is grpc.ChannelConnectivity.READY:
                self._lost_at = time.monotonic()
            self._state = state

    def stream_lost(self) -> None:
        """A stream that was delivering failed: open a restart window from now unless the
        channel is READY. Its consumer may see the failure long after the connection was
        lost (a draining server holds a stream for its grace period, and items gRPC had
        already received come first), and the window is to resume it, not to have passed."""
        with self._lock:
            if self._state is not grpc.ChannelConnectivity.READY:
                self._lost_at = time.monotonic()

    @property
    def ready(self) -> bool:
        with self._lock:
            return self._state is grpc.ChannelConnectivity.READY

    def window_end(self) -> float | None:
        """When the open restart window closes (monotonic), or None when none is open."""
        with self._lock:
            if self._lost_at is None:
                return None
            end = self._lost_at + self.restart_window
        return end if time.monotonic() < end else None

    def wait_before_attempt(self, deadline: float | None) -> float:
        """Seconds the next attempt may wait for the channel to be READY (0: send it now)."""
        with self._lock:
            state = self._state
        if state is grpc.ChannelConnectivity.READY:
            return 0.0
        end = self.window_end()
        if end is None:
            if state in (None, grpc.ChannelConnectivity.IDLE):
                return 0.0  # the attempt connects afresh; its failure is the answer
            end = time.monotonic() + UNREACHABLE_WAIT
        if deadline is not None:
            end = min(end, deadline)
        return max(0.0, end - time.monotonic())


Req = TypeVar("Req")


Resp = TypeVar("Resp")


Item = TypeVar("Item")


def is_position_marker(item: Any) -> bool:
    """The message that opens a Watch stream: a cursor, no change (the iterators skip it).
    A document event carries ``document``, not ``memory``: it is a change."""
    return (
        isinstance(item, memory_pb2.WatchMemoriesResponse)
        and not item.HasField("memory")
        and not item.HasField("document")
    )


# CANCELLED here is the server's: one that is shutting down cancels calls that arrived as it
# stopped (a call cancelled by this process raises asyncio.CancelledError, or is not awaited).
_RETRYABLE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)
_GONE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for idempotent calls that fail with UNAVAILABLE, DEADLINE_EXCEEDED or a server's
    CANCELLED (see the restart rule above for UNAVAILABLE while the server cannot be reached).

    Attempt n (1-based) waits `min(max_backoff, initial_backoff * multiplier**(n-1))`, scaled by
    a random factor in `[1 - jitter, 1]`, before attempt n+1. `max_attempts=1` disables retries.
    `attempt_timeout` bounds one attempt of a unary call (None: it may use all the time left of
    the call's deadline); set it below the deadline so a call that hangs is tried again in time.
    `rate_limit_wait`: a call the key's rate limit refused (it did not run) is sent again after
    the server's retry-after when that is at most this many seconds (and within the deadline);
    a longer wait raises `RateLimited` (0: always raise).
    """

    max_attempts: int = 6
    initial_backoff: float = 0.2
    max_backoff: float = 3.0
    multiplier: float = 2.0
    jitter: float = 0.5
    attempt_timeout: float | None = None
    rate_limit_wait: float = 1.0

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


def check_api_key(api_key: str) -> None:
    """Refuse a key that cannot be what `brain-admin` minted, before it is ever sent.

    A key (``brk_…``) is printable ASCII without spaces. Anything else would be refused by
    the server at best; a newline or a non-ASCII character is not even a valid gRPC header
    (the call fails with INTERNAL "Invalid metadata"). The message names the character and
    its position, never the key.
    """
    if not isinstance(api_key, str):
        raise TypeError(f"api_key must be a str, not {type(api_key).__name__}")
    if not api_key:
        raise ValueError("api_key is empty; mint one with `brain-admin keys create`")
    for position, char in enumerate(api_key):
        if "!" <= char <= "~":
            continue
        if char.isspace() and (position == 0 or not api_key[position:].strip()):
            raise ValueError(
                f"api_key has whitespace around it ({char!r} at position {position}); "
                "strip it (a key read from a file ends with a newline)"
            )
        what = repr(char) if char.isascii() else f"the non-ASCII character U+{ord(char):04X}"
        raise ValueError(
            f"api_key contains {what} at position {position}; a key (brk_…) is printable "
            "ASCII without spaces: copy it again from `brain-admin keys create`"
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
        restart_window: float,
    ) -> None:
        check_api_key(api_key)
        self.target = target
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._watch = ConnectionWatch(restart_window)
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
        code = rpc_status(exc)
        wait = retry_after(exc)
        if wait is not None and attempt < self.retry.max_attempts:
            # The key's rate limit refused the call before it ran, so sending it again is
            # safe for any call, a write too. A retry that met it waits as the server says
            # (the attempt that failed, UNAVAILABLE say, spent the tokens); a first attempt
            # waits when the wait is short (`RetryPolicy.rate_limit_wait`), else RateLimited
            # is the caller's to decide on.
            remaining = self._remaining(deadline)
            if remaining is not None and remaining <= wait:
                return None
            if (idempotent and attempt > 1) or wait <= self.retry.rate_limit_wait:
                return wait
            return None
        if not idempotent or code not in _RETRYABLE or self.retry.max_attempts <= 1:
            return None
        if code in _GONE and not self._watch.ready:
            # The server cannot be reached: retried (after waiting for the channel, see the
            # rule above) only inside a restart window; outside one the wait that came before
            # this attempt already gave the server its chance.
            end = self._watch.window_end()
            remaining = self._remaining(deadline)
            if end is None or (remaining is not None and remaining <= 0):
                return None
            return 0.0
        if attempt >= self.retry.max_attempts:
            return None
        delay = self.retry.backoff(attempt)
        remaining = self._remaining(deadline)
        if remaining is not None and remaining <= delay:
            return None
        return delay
