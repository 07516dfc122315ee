"""Ergonomic sync and asyncio clients for the Shared Brain gRPC API.

    from brain.clients import BrainClient, Scope

    scope = Scope(user_id="alice", namespace="app")
    with BrainClient("127.0.0.1:50051", api_key, scope=scope) as c:
        saved = c.save("Alice prefers tabs", kind="preference", tags=["style"])
        for hit in c.search("tabs or spaces?").hits:
            print(hit.memory.id, hit.score, hit.memory.content)

Conventions shared by `BrainClient` and `AsyncBrainClient`:

- **Scope** is set once at construction and stamped on every request's `scope` field.
- **Results** are the generated protobuf messages: unary methods return the RPC's response
  message (`save` -> `SaveMemoryResponse`, `get` -> `GetMemoryResponse`, ...). Paginated RPCs
  (`list`, `list_candidates`, `list_audit_events`) return an iterator over the items of every
  page; `export` and `watch` return an iterator over the streamed response messages.
- **Deadlines**: unary calls get `timeout` seconds (default: the client's `timeout`, 10 s),
  spent across all retries. Streams have no deadline unless `timeout` is given.
- **Retries**: `UNAVAILABLE` and `DEADLINE_EXCEEDED`, only for idempotent calls — reads, forget
  (forgetting twice is a no-op), and writes that carry an `idempotency_key` — with exponential
  backoff and jitter (`RetryPolicy`). Export and watch resume from the last cursor they delivered.
- **Idempotency keys**: save, update and propose attach a fresh key per call unless you pass
  one (or `idempotency_key=""` to send none), and every retry of that call reuses it, so a
  write that committed but answered late is replayed, never stored twice. A failed write's
  error carries the key in `idempotency_key`: pass it back to retry the same write yourself.
- **Errors** raise a `brain.clients.errors.BrainClientError` subclass chosen by status code, with
  the server's message.
"""

# `timeout` on the async methods is the gRPC deadline handed to the call, not an asyncio timeout.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, Self, TypeAlias, TypedDict, TypeVar, Unpack

import grpc
import grpc.aio
from google.protobuf.duration_pb2 import Duration
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.timestamp_pb2 import Timestamp

from brain.clients.errors import BrainClientError, from_rpc_error, rpc_status
from brain.v1 import (
    audit_pb2,
    audit_pb2_grpc,
    common_pb2,
    identity_pb2,
    identity_pb2_grpc,
    memory_pb2,
    memory_pb2_grpc,
    review_pb2,
    review_pb2_grpc,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "AsyncBrainClient",
    "BrainClient",
    "DraftFields",
    "RetryPolicy",
    "Scope",
    "time_travel",
]

Scope = common_pb2.Scope
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
TimestampLike = datetime | Timestamp


def _is_position_marker(item: Any) -> bool:
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


class DraftFields(TypedDict, total=False):
    """Optional memory fields accepted by `save`, `propose` and `update` (see `MemoryDraft`)."""

    kind: str
    tags: Sequence[str]
    metadata: Mapping[str, str]
    labels: Sequence[str]
    confidence: float
    importance: float
    valid_from: TimestampLike
    valid_to: TimestampLike
    expires_at: TimestampLike


Decision: TypeAlias = Literal["approve", "reject"] | review_pb2.ReviewDecision.ValueType
_DECISIONS = {
    "approve": review_pb2.REVIEW_DECISION_APPROVE,
    "reject": review_pb2.REVIEW_DECISION_REJECT,
}


def _timestamp(value: TimestampLike) -> Timestamp:
    if isinstance(value, Timestamp):
        return value
    if value.tzinfo is None:
        raise ValueError(f"timestamp {value.isoformat()} has no timezone; pass an aware datetime")
    ts = Timestamp()
    ts.FromDatetime(value)
    return ts


def time_travel(
    *,
    as_of: TimestampLike | None = None,
    valid_at: TimestampLike | None = None,
    any_valid_time: bool = False,
) -> common_pb2.TimeTravel:
    """Build the bitemporal read coordinates for `get`, `search`, `list` and `build_context`."""
    t = common_pb2.TimeTravel(any_valid_time=any_valid_time)
    if as_of is not None:
        t.as_of.CopyFrom(_timestamp(as_of))
    if valid_at is not None:
        t.valid_at.CopyFrom(_timestamp(valid_at))
    return t


def _draft(content: str | None, fields: DraftFields) -> common_pb2.MemoryDraft:
    d = common_pb2.MemoryDraft(
        content=content or "",
        kind=fields.get("kind", ""),
        tags=list(fields.get("tags", ())),
        metadata=dict(fields.get("metadata", {})),
        labels=list(fields.get("labels", ())),
    )
    if "confidence" in fields:
        d.confidence = fields["confidence"]
    if "importance" in fields:
        d.importance = fields["importance"]
    if "valid_from" in fields:
        d.valid_from.CopyFrom(_timestamp(fields["valid_from"]))
    if "valid_to" in fields:
        d.valid_to.CopyFrom(_timestamp(fields["valid_to"]))
    if "expires_at" in fields:
        d.expires_at.CopyFrom(_timestamp(fields["expires_at"]))
    return d


def _idempotency_key(given: str | None) -> str:
    """The caller's key, or a fresh one for this logical call ("" sends none)."""
    return f"client-{uuid.uuid4()}" if given is None else given


def _failed(exc: grpc.RpcError, method: str, request: Any) -> BrainClientError:
    """The client error for a call that will not be retried, naming its idempotency key."""
    error = from_rpc_error(exc, method)
    error.idempotency_key = getattr(request, "idempotency_key", "")
    return error


def _read_pem(value: bytes | str | Path | None) -> bytes | None:
    """PEM bytes as given, PEM text, or the contents of a file path."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str) and value.lstrip().startswith("-----BEGIN"):
        return value.encode()
    return Path(value).expanduser().read_bytes()


def _credentials(
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
        root_certificates=_read_pem(root_certificates),
        private_key=_read_pem(private_key),
        certificate_chain=_read_pem(certificate_chain),
    )


class _Paged(Protocol):
    page_token: str


class _PageOf(Protocol):
    next_page_token: str


class _Resumable(Protocol):
    cursor: str


class _Requests:
    """Builds every request message with the client's scope stamped on field 1."""

    def __init__(self, scope: common_pb2.Scope) -> None:
        self.scope = scope

    def save(
        self, content: str, supersedes: Iterable[str], idempotency_key: str, fields: DraftFields
    ) -> memory_pb2.SaveMemoryRequest:
        return memory_pb2.SaveMemoryRequest(
            scope=self.scope,
            memory=_draft(content, fields),
            supersedes=list(supersedes),
            idempotency_key=idempotency_key,
        )

    def update(
        self,
        id: str,
        expected_version: int,
        idempotency_key: str,
        fields: DraftFields,
        content: str | None,
    ) -> memory_pb2.UpdateMemoryRequest:
        paths = sorted(fields) + (["content"] if content is not None else [])
        if not paths:
            raise ValueError("update needs at least one field to change")
        return memory_pb2.UpdateMemoryRequest(
            scope=self.scope,
            id=id,
            patch=_draft(content, fields),
            update_mask=FieldMask(paths=paths),
            expected_version=expected_version,
            idempotency_key=idempotency_key,
        )

    def propose(
        self,
        content: str,
        reason: str,
        supersedes: Iterable[str],
        review_within: timedelta | None,
        idempotency_key: str,
        fields: DraftFields,
    ) -> review_pb2.ProposeMemoryRequest:
        request = review_pb2.ProposeMemoryRequest(
            scope=self.scope,
            memory=_draft(content, fields),
            supersedes=list(supersedes),
            reason=reason,
            idempotency_key=idempotency_key,
        )
        if review_within is not None:
            request.review_within.CopyFrom(_duration(review_within))
        return request

    def review(
        self, id: str, decision: Decision, reason: str, readmit_tombstoned: bool
    ) -> review_pb2.ReviewCandidateRequest:
        value = _DECISIONS[decision] if isinstance(decision, str) else decision
        return review_pb2.ReviewCandidateRequest(
            scope=self.scope,
            id=id,
            decision=value,
            reason=reason,
            readmit_tombstoned=readmit_tombstoned,
        )

    def audit(
        self, memory_id: str, principal: str, since: TimestampLike | None, page_size: int
    ) -> audit_pb2.ListAuditEventsRequest:
        request = audit_pb2.ListAuditEventsRequest(
            scope=self.scope, memory_id=memory_id, principal=principal, page_size=page_size
        )
        if since is not None:
            request.since.CopyFrom(_timestamp(since))
        return request


def _duration(value: timedelta) -> Duration:
    d = Duration()
    d.FromTimedelta(value)
    return d


class _Base:
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
        self._requests = _Requests(self._scope)
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


class BrainClient(_Base):
    """Blocking client; see the module docstring for scope, results, deadlines and retries.

    Use as a context manager, or call `close()`. `interceptors` are gRPC client interceptors
    (tracing, metrics). TLS is on when `tls=True` or any certificate
    is given: `root_certificates` (PEM bytes, PEM text or a path; default: system roots) and,
    for mTLS, `certificate_chain` + `private_key`.
    """

    def __init__(
        self,
        target: str,
        api_key: str,
        *,
        scope: common_pb2.Scope | None = None,
        tls: bool = False,
        root_certificates: bytes | str | Path | None = None,
        certificate_chain: bytes | str | Path | None = None,
        private_key: bytes | str | Path | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
        interceptors: Sequence[Any] = (),
    ) -> None:
        super().__init__(target, api_key, scope=scope, timeout=timeout, retry=retry)
        creds = _credentials(tls, root_certificates, certificate_chain, private_key)
        options = [*_CHANNEL_OPTIONS, *channel_options]
        self._channel: grpc.Channel = (
            grpc.secure_channel(target, creds, options)
            if creds is not None
            else grpc.insecure_channel(target, options)
        )
        channel = grpc.intercept_channel(self._channel, *interceptors)
        self._memory = memory_pb2_grpc.MemoryServiceStub(channel)
        self._review = review_pb2_grpc.ReviewServiceStub(channel)
        self._audit = audit_pb2_grpc.AuditServiceStub(channel)
        self._identity = identity_pb2_grpc.IdentityServiceStub(channel)

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------------

    def _unary(
        self,
        method: str,
        rpc: grpc.UnaryUnaryMultiCallable[Req, Resp],
        request: Req,
        *,
        idempotent: bool,
        timeout: float | None,
    ) -> Resp:
        deadline = self._deadline(timeout, self.timeout)
        attempt = 0
        while True:
            attempt += 1
            try:
                return rpc(
                    request, timeout=self._attempt_timeout(deadline), metadata=self._metadata
                )
            except grpc.RpcError as exc:
                delay = self._retry_delay(exc, attempt, deadline, idempotent)
                if delay is None:
                    raise _failed(exc, method, request) from exc
                time.sleep(delay)

    def _pages(
        self,
        method: str,
        rpc: grpc.UnaryUnaryMultiCallable[Any, Any],
        request: _Paged,
        items: Callable[[Any], Iterable[Item]],
        timeout: float | None,
    ) -> Iterator[Item]:
        while True:
            page: _PageOf = self._unary(method, rpc, request, idempotent=True, timeout=timeout)
            yield from items(page)
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    def _stream(
        self,
        method: str,
        rpc: grpc.UnaryStreamMultiCallable[Any, Resp],
        request: _Resumable,
        timeout: float | None,
    ) -> Iterator[Resp]:
        deadline = self._deadline(timeout, None)
        attempt = 0
        while True:
            attempt += 1
            call = rpc(request, timeout=self._remaining(deadline), metadata=self._metadata)
            try:
                for item in call:
                    attempt = 0
                    cursor = getattr(item, "cursor", "")
                    if cursor:  # resume after the last delivered item on reconnect
                        request.cursor = cursor
                    if not _is_position_marker(item):
                        yield item
                return
            except grpc.RpcError as exc:
                delay = self._retry_delay(exc, max(attempt, 1), deadline, idempotent=True)
                if delay is None:
                    raise from_rpc_error(exc, method) from exc
                time.sleep(delay)
            finally:
                call.cancel()  # type: ignore[no-untyped-call]

    # -- MemoryService ---------------------------------------------------------------------

    def save(
        self,
        content: str,
        *,
        supersedes: Iterable[str] = (),
        idempotency_key: str | None = None,
        timeout: float | None = None,
        **fields: Unpack[DraftFields],
    ) -> memory_pb2.SaveMemoryResponse:
        """Store a memory; retried with one idempotency key (fresh unless given)."""
        request = self._requests.save(
            content, supersedes, _idempotency_key(idempotency_key), fields
        )
        return self._unary(
            "SaveMemory",
            self._memory.SaveMemory,
            request,
            idempotent=bool(request.idempotency_key),
            timeout=timeout,
        )

    def get(
        self, id: str, *, time: common_pb2.TimeTravel | None = None, timeout: float | None = None
    ) -> memory_pb2.GetMemoryResponse:
        """Read one memory by id (NotFound when missing or outside the key's scope)."""
        request = memory_pb2.GetMemoryRequest(scope=self._scope, id=id, time=time)
        return self._unary(
            "GetMemory", self._memory.GetMemory, request, idempotent=True, timeout=timeout
        )

    def update(
        self,
        id: str,
        *,
        content: str | None = None,
        expected_version: int = 0,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        **fields: Unpack[DraftFields],
    ) -> memory_pb2.UpdateMemoryResponse:
        """Write a new version with the given fields changed (the update mask is derived)."""
        request = self._requests.update(
            id, expected_version, _idempotency_key(idempotency_key), fields, content
        )
        return self._unary(
            "UpdateMemory",
            self._memory.UpdateMemory,
            request,
            idempotent=bool(request.idempotency_key),
            timeout=timeout,
        )

    def forget(
        self, id: str, *, reason: str = "", timeout: float | None = None
    ) -> memory_pb2.ForgetMemoryResponse:
        """Erase a memory's content in every version and leave a tombstone (safe to retry)."""
        request = memory_pb2.ForgetMemoryRequest(scope=self._scope, id=id, reason=reason)
        return self._unary(
            "ForgetMemory", self._memory.ForgetMemory, request, idempotent=True, timeout=timeout
        )

    def search(
        self,
        query: str,
        *,
        limit: int = 0,
        filter: common_pb2.MemoryFilter | None = None,
        time: common_pb2.TimeTravel | None = None,
        mode: memory_pb2.SearchMode.ValueType = memory_pb2.SEARCH_MODE_UNSPECIFIED,
        query_embedding: Sequence[float] = (),
        timeout: float | None = None,
    ) -> memory_pb2.SearchMemoriesResponse:
        """Hybrid recall; hits come best first with their fused score."""
        request = memory_pb2.SearchMemoriesRequest(
            scope=self._scope,
            query=query,
            limit=limit,
            filter=filter,
            time=time,
            mode=mode,
            query_embedding=list(query_embedding),
        )
        return self._unary(
            "SearchMemories", self._memory.SearchMemories, request, idempotent=True, timeout=timeout
        )

    def list(
        self,
        *,
        filter: common_pb2.MemoryFilter | None = None,
        time: common_pb2.TimeTravel | None = None,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> Iterator[common_pb2.Memory]:
        """Every memory matching `filter`, fetched page by page as the iterator advances."""
        request = memory_pb2.ListMemoriesRequest(
            scope=self._scope, filter=filter, time=time, page_size=page_size
        )
        return self._pages(
            "ListMemories", self._memory.ListMemories, request, lambda p: p.memories, timeout
        )

    def list_page(
        self,
        *,
        filter: common_pb2.MemoryFilter | None = None,
        time: common_pb2.TimeTravel | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> memory_pb2.ListMemoriesResponse:
        """One page of memories, newest first, with the token of the next (empty on the last)."""
        request = memory_pb2.ListMemoriesRequest(
            scope=self._scope, filter=filter, time=time, page_size=page_size, page_token=page_token
        )
        return self._unary(
            "ListMemories", self._memory.ListMemories, request, idempotent=True, timeout=timeout
        )

    def history(
        self, id: str, *, timeout: float | None = None
    ) -> memory_pb2.GetMemoryHistoryResponse:
        """Every version of one memory, oldest first."""
        request = memory_pb2.GetMemoryHistoryRequest(scope=self._scope, id=id)
        return self._unary(
            "GetMemoryHistory",
            self._memory.GetMemoryHistory,
            request,
            idempotent=True,
            timeout=timeout,
        )

    def export(
        self,
        *,
        filter: common_pb2.MemoryFilter | None = None,
        cursor: str = "",
        include_history: bool = False,
        timeout: float | None = None,
    ) -> Iterator[memory_pb2.ExportMemoriesResponse]:
        """Stream every memory in scope (all statuses); resumes from its cursor on UNAVAILABLE."""
        request = memory_pb2.ExportMemoriesRequest(
            scope=self._scope, filter=filter, cursor=cursor, include_history=include_history
        )
        return self._stream("ExportMemories", self._memory.ExportMemories, request, timeout)

    def watch(
        self,
        *,
        filter: common_pb2.MemoryFilter | None = None,
        cursor: str = "",
        timeout: float | None = None,
    ) -> Iterator[memory_pb2.WatchMemoriesResponse]:
        """Stream changes as they happen (from now, or after `cursor`); close it to stop."""
        request = memory_pb2.WatchMemoriesRequest(scope=self._scope, filter=filter, cursor=cursor)
        return self._stream("WatchMemories", self._memory.WatchMemories, request, timeout)

    def build_context(
        self,
        query: str,
        *,
        token_budget: int = 0,
        max_memories: int = 0,
        filter: common_pb2.MemoryFilter | None = None,
        time: common_pb2.TimeTravel | None = None,
        timeout: float | None = None,
    ) -> memory_pb2.BuildContextResponse:
        """Pack the best matches for `query` into a prompt-ready block within `token_budget`."""
        request = memory_pb2.BuildContextRequest(
            scope=self._scope,
            query=query,
            token_budget=token_budget,
            max_memories=max_memories,
            filter=filter,
            time=time,
        )
        return self._unary(
            "BuildContext", self._memory.BuildContext, request, idempotent=True, timeout=timeout
        )

    # -- ReviewService ---------------------------------------------------------------------

    def propose(
        self,
        content: str,
        *,
        reason: str,
        supersedes: Iterable[str] = (),
        review_within: timedelta | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        **fields: Unpack[DraftFields],
    ) -> review_pb2.ProposeMemoryResponse:
        """Store a candidate awaiting human review; retried with one idempotency key."""
        request = self._requests.propose(
            content, reason, supersedes, review_within, _idempotency_key(idempotency_key), fields
        )
        return self._unary(
            "ProposeMemory",
            self._review.ProposeMemory,
            request,
            idempotent=bool(request.idempotency_key),
            timeout=timeout,
        )

    def list_candidates(
        self, *, proposed_by: str = "", page_size: int = 0, timeout: float | None = None
    ) -> Iterator[common_pb2.Memory]:
        """Every pending candidate (optionally from one proposer), page by page."""
        request = review_pb2.ListCandidatesRequest(
            scope=self._scope, proposed_by=proposed_by, page_size=page_size
        )
        return self._pages(
            "ListCandidates", self._review.ListCandidates, request, lambda p: p.candidates, timeout
        )

    def review(
        self,
        id: str,
        decision: Decision,
        *,
        reason: str,
        readmit_tombstoned: bool = False,
        timeout: float | None = None,
    ) -> review_pb2.ReviewCandidateResponse:
        """Approve or reject a candidate (`decision` is "approve" or "reject"); never retried."""
        request = self._requests.review(id, decision, reason, readmit_tombstoned)
        return self._unary(
            "ReviewCandidate",
            self._review.ReviewCandidate,
            request,
            idempotent=False,
            timeout=timeout,
        )

    def withdraw(
        self, id: str, *, reason: str = "", timeout: float | None = None
    ) -> review_pb2.WithdrawCandidateResponse:
        """The proposer cancels its own pending candidate; never retried."""
        request = review_pb2.WithdrawCandidateRequest(scope=self._scope, id=id, reason=reason)
        return self._unary(
            "WithdrawCandidate",
            self._review.WithdrawCandidate,
            request,
            idempotent=False,
            timeout=timeout,
        )

    # -- AuditService, IdentityService -----------------------------------------------------

    def list_audit_events(
        self,
        *,
        memory_id: str = "",
        principal: str = "",
        since: TimestampLike | None = None,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> Iterator[audit_pb2.AuditEvent]:
        """The tenant's audit events (optionally for one memory or principal), page by page."""
        request = self._requests.audit(memory_id, principal, since, page_size)
        return self._pages(
            "ListAuditEvents", self._audit.ListAuditEvents, request, lambda p: p.events, timeout
        )

    def whoami(self, *, timeout: float | None = None) -> identity_pb2.WhoAmIResponse:
        """Who the key is: tenant, principal, permissions, confinement, allowed methods."""
        request = identity_pb2.WhoAmIRequest(scope=self._scope)
        return self._unary(
            "WhoAmI", self._identity.WhoAmI, request, idempotent=True, timeout=timeout
        )


class AsyncBrainClient(_Base):
    """The asyncio twin of `BrainClient`: same constructor, same methods, awaited.

    Paginated and streaming methods return async iterators. Create it inside the event loop
    that will use it; close with `await client.close()` or `async with`.
    """

    def __init__(
        self,
        target: str,
        api_key: str,
        *,
        scope: common_pb2.Scope | None = None,
        tls: bool = False,
        root_certificates: bytes | str | Path | None = None,
        certificate_chain: bytes | str | Path | None = None,
        private_key: bytes | str | Path | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
        interceptors: Sequence[Any] = (),
    ) -> None:
        super().__init__(target, api_key, scope=scope, timeout=timeout, retry=retry)
        creds = _credentials(tls, root_certificates, certificate_chain, private_key)
        options = [*_CHANNEL_OPTIONS, *channel_options]
        self._channel: grpc.aio.Channel = (
            grpc.aio.secure_channel(target, creds, options, interceptors=interceptors)
            if creds is not None
            else grpc.aio.insecure_channel(target, options, interceptors=interceptors)
        )
        self._memory = memory_pb2_grpc.MemoryServiceStub(self._channel)
        self._review = review_pb2_grpc.ReviewServiceStub(self._channel)
        self._audit = audit_pb2_grpc.AuditServiceStub(self._channel)
        self._identity = identity_pb2_grpc.IdentityServiceStub(self._channel)

    async def close(self) -> None:
        """Close the channel; calls in flight are cancelled."""
        await self._channel.close(None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- plumbing ------------------------------------------------------------------------

    async def _unary(
        self,
        method: str,
        rpc: grpc.aio.UnaryUnaryMultiCallable[Req, Resp],
        request: Req,
        *,
        idempotent: bool,
        timeout: float | None,
    ) -> Resp:
        deadline = self._deadline(timeout, self.timeout)
        attempt = 0
        while True:
            attempt += 1
            try:
                return await rpc(
                    request, timeout=self._attempt_timeout(deadline), metadata=self._metadata
                )
            except grpc.RpcError as exc:
                delay = self._retry_delay(exc, attempt, deadline, idempotent)
                if delay is None:
                    raise _failed(exc, method, request) from exc
                await asyncio.sleep(delay)

    async def _pages(
        self,
        method: str,
        rpc: grpc.aio.UnaryUnaryMultiCallable[Any, Any],
        request: _Paged,
        items: Callable[[Any], Iterable[Item]],
        timeout: float | None,
    ) -> AsyncIterator[Item]:
        while True:
            page: _PageOf = await self._unary(
                method, rpc, request, idempotent=True, timeout=timeout
            )
            for item in items(page):
                yield item
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    async def _stream(
        self,
        method: str,
        rpc: grpc.aio.UnaryStreamMultiCallable[Any, Resp],
        request: _Resumable,
        timeout: float | None,
    ) -> AsyncIterator[Resp]:
        deadline = self._deadline(timeout, None)
        attempt = 0
        while True:
            attempt += 1
            call = rpc(request, timeout=self._remaining(deadline), metadata=self._metadata)
            try:
                async for item in call:
                    attempt = 0
                    cursor = getattr(item, "cursor", "")
                    if cursor:
                        request.cursor = cursor
                    if not _is_position_marker(item):
                        yield item
                return
            except grpc.RpcError as exc:
                delay = self._retry_delay(exc, max(attempt, 1), deadline, idempotent=True)
                if delay is None:
                    raise from_rpc_error(exc, method) from exc
                await asyncio.sleep(delay)
            finally:
                call.cancel()

    # -- MemoryService ---------------------------------------------------------------------

    async def save(
        self,
        content: str,
        *,
        supersedes: Iterable[str] = (),
        idempotency_key: str | None = None,
        timeout: float | None = None,
        **fields: Unpack[DraftFields],
    ) -> memory_pb2.SaveMemoryResponse:
        """Store a memory; retried with one idempotency key (fresh unless given)."""
        request = self._requests.save(
            content, supersedes, _idempotency_key(idempotency_key), fields
        )
        return await self._unary(
            "SaveMemory",
            self._memory.SaveMemory,
            request,
            idempotent=bool(request.idempotency_key),
            timeout=timeout,
        )

    async def get(
        self, id: str, *, time: common_pb2.TimeTravel | None = None, timeout: float | None = None
    ) -> memory_pb2.GetMemoryResponse:
        """Read one memory by id (NotFound when missing or outside the key's scope)."""
        request = memory_pb2.GetMemoryRequest(scope=self._scope, id=id, time=time)
        return await self._unary(
            "GetMemory", self._memory.GetMemory, request, idempotent=True, timeout=timeout
        )

    async def update(
        self,
        id: str,
        *,
        content: str | None = None,
        expected_version: int = 0,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        **fields: Unpack[DraftFields],
    ) -> memory_pb2.UpdateMemoryResponse:
        """Write a new version with the given fields changed (the update mask is derived)."""
        request = self._requests.update(
            id, expected_version, _idempotency_key(idempotency_key), fields, content
        )
        return await self._unary(
            "UpdateMemory",
            self._memory.UpdateMemory,
            request,
            idempotent=bool(request.idempotency_key),
            timeout=timeout,
        )

    async def forget(
        self, id: str, *, reason: str = "", timeout: float | None = None
    ) -> memory_pb2.ForgetMemoryResponse:
        """Erase a memory's content in every version and leave a tombstone (safe to retry)."""
        request = memory_pb2.ForgetMemoryRequest(scope=self._scope, id=id, reason=reason)
        return await self._unary(
            "ForgetMemory", self._memory.ForgetMemory, request, idempotent=True, timeout=timeout
        )

    async def search(
        self,
        query: str,
        *,
        limit: int = 0,
        filter: common_pb2.MemoryFilter | None = None,
        time: common_pb2.TimeTravel | None = None,
        mode: memory_pb2.SearchMode.ValueType = memory_pb2.SEARCH_MODE_UNSPECIFIED,
        query_embedding: Sequence[float] = (),
        timeout: float | None = None,
    ) -> memory_pb2.SearchMemoriesResponse:
        """Hybrid recall; hits come best first with their fused score."""
        request = memory_pb2.SearchMemoriesRequest(
            scope=self._scope,
            query=query,
            limit=limit,
            filter=filter,
            time=time,
            mode=mode,
            query_embedding=list(query_embedding),
        )
        return await self._unary(
            "SearchMemories", self._memory.SearchMemories, request, idempotent=True, timeout=timeout
        )

    def list(
        self,
        *,
        filter: common_pb2.MemoryFilter | None = None,
        time: common_pb2.TimeTravel | None = None,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> AsyncIterator[common_pb2.Memory]:
        """Every memory matching `filter`, fetched page by page as the iterator advances."""
        request = memory_pb2.ListMemoriesRequest(
            scope=self._scope, filter=filter, time=time, page_size=page_size
        )
        return self._pages(
            "ListMemories", self._memory.ListMemories, request, lambda p: p.memories, timeout
        )

    async def list_page(
        self,
        *,
        filter: common_pb2.MemoryFilter | None = None,
        time: common_pb2.TimeTravel | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> memory_pb2.ListMemoriesResponse:
        """One page of memories, newest first, with the token of the next (empty on the last)."""
        request = memory_pb2.ListMemoriesRequest(
            scope=self._scope, filter=filter, time=time, page_size=page_size, page_token=page_token
        )
        return await self._unary(
            "ListMemories", self._memory.ListMemories, request, idempotent=True, timeout=timeout
        )

    async def history(
        self, id: str, *, timeout: float | None = None
    ) -> memory_pb2.GetMemoryHistoryResponse:
        """Every version of one memory, oldest first."""
        request = memory_pb2.GetMemoryHistoryRequest(scope=self._scope, id=id)
        return await self._unary(
            "GetMemoryHistory",
            self._memory.GetMemoryHistory,
            request,
            idempotent=True,
            timeout=timeout,
        )

    def export(
        self,
        *,
        filter: common_pb2.MemoryFilter | None = None,
        cursor: str = "",
        include_history: bool = False,
        timeout: float | None = None,
    ) -> AsyncIterator[memory_pb2.ExportMemoriesResponse]:
        """Stream every memory in scope (all statuses); resumes from its cursor on UNAVAILABLE."""
        request = memory_pb2.ExportMemoriesRequest(
            scope=self._scope, filter=filter, cursor=cursor, include_history=include_history
        )
        return self._stream("ExportMemories", self._memory.ExportMemories, request, timeout)

    def watch(
        self,
        *,
        filter: common_pb2.MemoryFilter | None = None,
        cursor: str = "",
        timeout: float | None = None,
    ) -> AsyncIterator[memory_pb2.WatchMemoriesResponse]:
        """Stream changes as they happen (from now, or after `cursor`); close it to stop."""
        request = memory_pb2.WatchMemoriesRequest(scope=self._scope, filter=filter, cursor=cursor)
        return self._stream("WatchMemories", self._memory.WatchMemories, request, timeout)

    async def build_context(
        self,
        query: str,
        *,
        token_budget: int = 0,
        max_memories: int = 0,
        filter: common_pb2.MemoryFilter | None = None,
        time: common_pb2.TimeTravel | None = None,
        timeout: float | None = None,
    ) -> memory_pb2.BuildContextResponse:
        """Pack the best matches for `query` into a prompt-ready block within `token_budget`."""
        request = memory_pb2.BuildContextRequest(
            scope=self._scope,
            query=query,
            token_budget=token_budget,
            max_memories=max_memories,
            filter=filter,
            time=time,
        )
        return await self._unary(
            "BuildContext", self._memory.BuildContext, request, idempotent=True, timeout=timeout
        )

    # -- ReviewService ---------------------------------------------------------------------

    async def propose(
        self,
        content: str,
        *,
        reason: str,
        supersedes: Iterable[str] = (),
        review_within: timedelta | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        **fields: Unpack[DraftFields],
    ) -> review_pb2.ProposeMemoryResponse:
        """Store a candidate awaiting human review; retried with one idempotency key."""
        request = self._requests.propose(
            content, reason, supersedes, review_within, _idempotency_key(idempotency_key), fields
        )
        return await self._unary(
            "ProposeMemory",
            self._review.ProposeMemory,
            request,
            idempotent=bool(request.idempotency_key),
            timeout=timeout,
        )

    def list_candidates(
        self, *, proposed_by: str = "", page_size: int = 0, timeout: float | None = None
    ) -> AsyncIterator[common_pb2.Memory]:
        """Every pending candidate (optionally from one proposer), page by page."""
        request = review_pb2.ListCandidatesRequest(
            scope=self._scope, proposed_by=proposed_by, page_size=page_size
        )
        return self._pages(
            "ListCandidates", self._review.ListCandidates, request, lambda p: p.candidates, timeout
        )

    async def review(
        self,
        id: str,
        decision: Decision,
        *,
        reason: str,
        readmit_tombstoned: bool = False,
        timeout: float | None = None,
    ) -> review_pb2.ReviewCandidateResponse:
        """Approve or reject a candidate (`decision` is "approve" or "reject"); never retried."""
        request = self._requests.review(id, decision, reason, readmit_tombstoned)
        return await self._unary(
            "ReviewCandidate",
            self._review.ReviewCandidate,
            request,
            idempotent=False,
            timeout=timeout,
        )

    async def withdraw(
        self, id: str, *, reason: str = "", timeout: float | None = None
    ) -> review_pb2.WithdrawCandidateResponse:
        """The proposer cancels its own pending candidate; never retried."""
        request = review_pb2.WithdrawCandidateRequest(scope=self._scope, id=id, reason=reason)
        return await self._unary(
            "WithdrawCandidate",
            self._review.WithdrawCandidate,
            request,
            idempotent=False,
            timeout=timeout,
        )

    # -- AuditService, IdentityService -----------------------------------------------------

    def list_audit_events(
        self,
        *,
        memory_id: str = "",
        principal: str = "",
        since: TimestampLike | None = None,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> AsyncIterator[audit_pb2.AuditEvent]:
        """The tenant's audit events (optionally for one memory or principal), page by page."""
        request = self._requests.audit(memory_id, principal, since, page_size)
        return self._pages(
            "ListAuditEvents", self._audit.ListAuditEvents, request, lambda p: p.events, timeout
        )

    async def whoami(self, *, timeout: float | None = None) -> identity_pb2.WhoAmIResponse:
        """Who the key is: tenant, principal, permissions, confinement, allowed methods."""
        request = identity_pb2.WhoAmIRequest(scope=self._scope)
        return await self._unary(
            "WhoAmI", self._identity.WhoAmI, request, idempotent=True, timeout=timeout
        )
