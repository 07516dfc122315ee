"""`BrainClient`: the blocking client."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self, Unpack

import grpc
import grpc.aio

from brain.clients._base import (
    _CHANNEL_OPTIONS,
    DEFAULT_TIMEOUT,
    RESTART_WINDOW,
    ClientBase,
    Item,
    Paged,
    PageOf,
    Req,
    Resp,
    Resumable,
    RetryPolicy,
    credentials,
    failed,
    is_position_marker,
)
from brain.clients._conflicts import ConflictMethods
from brain.clients._documents import DocumentMethods
from brain.clients._exit import closed_at_exit, poller_stopped
from brain.clients._requests import (
    Decision,
    DraftFields,
    TimestampLike,
    fresh_idempotency_key,
)
from brain.clients.errors import from_rpc_error
from brain.v1 import (
    audit_pb2,
    audit_pb2_grpc,
    common_pb2,
    graph_pb2,
    graph_pb2_grpc,
    identity_pb2,
    identity_pb2_grpc,
    knowledge_pb2,
    knowledge_pb2_grpc,
    memory_pb2,
    memory_pb2_grpc,
    review_pb2,
    review_pb2_grpc,
)

# gRPC core's connectivity states as grpc.ChannelConnectivity (`_observe_now`).
_CORE_CONNECTIVITY: dict[Any, grpc.ChannelConnectivity] = {
    state.value[0]: state for state in grpc.ChannelConnectivity
}

# How long close() waits at most for gRPC's connectivity poller: it notices within one
# poll (0.2 s), so this bound is reached only on a machine too busy to run the thread.
_POLLER_WAIT_SECONDS = 2.0


class BrainClient(ConflictMethods, DocumentMethods, ClientBase):
    """Blocking client; see the module docstring for scope, results, deadlines and retries.

    Use as a context manager, or call `close()`. `interceptors` are gRPC client interceptors
    (tracing, metrics). TLS is on when `tls=True` or any certificate
    is given: `root_certificates` (PEM bytes, PEM text or a path; default: system roots) and,
    for mTLS, `certificate_chain` + `private_key`. `restart_window`: for this many seconds
    after a working connection is lost, calls wait for the server to come back (within their
    deadline) instead of failing; see `brain.clients._base` for the exact rule.
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
        restart_window: float = RESTART_WINDOW,
    ) -> None:
        super().__init__(
            target, api_key, scope=scope, timeout=timeout, retry=retry,
            restart_window=restart_window,
        )  # fmt: skip
        creds = credentials(tls, root_certificates, certificate_chain, private_key)
        options = [*_CHANNEL_OPTIONS, *channel_options]
        self._channel: grpc.Channel = (
            grpc.secure_channel(target, creds, options)
            if creds is not None
            else grpc.insecure_channel(target, options)
        )
        # Connectivity changes arrive on gRPC's polling thread; never asks it to connect.
        self._channel.subscribe(self._watch.observe, try_to_connect=False)
        self._closed = False
        closed_at_exit(self, self._channel)
        channel = grpc.intercept_channel(self._channel, *interceptors)
        self._memory = memory_pb2_grpc.MemoryServiceStub(channel)
        self._review: review_pb2_grpc.ReviewServiceStub = review_pb2_grpc.ReviewServiceStub(channel)
        self._audit = audit_pb2_grpc.AuditServiceStub(channel)
        self._identity = identity_pb2_grpc.IdentityServiceStub(channel)
        self._graph = graph_pb2_grpc.GraphServiceStub(channel)
        self._knowledge = knowledge_pb2_grpc.KnowledgeServiceStub(channel)

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled. Closing twice is a no-op."""
        if self._closed:
            return
        self._closed = True
        self._channel.unsubscribe(self._watch.observe)
        # gRPC's poller looks for subscribers only between its polls; a channel closed in
        # between makes it raise "Channel closed!" on its own thread (a traceback on the
        # user's terminal). Let it see there is nothing left to watch, then close.
        poller_stopped(self._channel, _POLLER_WAIT_SECONDS)
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

    def _observe_now(self) -> None:
        """Record the channel's state as it is now, as the asyncio client does after a
        failed attempt. The subscription's notices come on gRPC's polling thread and can
        lag: a new client whose first call the server answered UNAVAILABLE (its database
        down) still saw a channel never READY, took it for a server it cannot reach, and
        raised instead of retrying (rule 4 of `_base`). The state is read from the
        channel's core object, as gRPC's own poller reads it; without one, nothing."""
        check = getattr(getattr(self._channel, "_channel", None), "check_connectivity_state", None)
        if check is None:
            return
        state = _CORE_CONNECTIVITY.get(check(False))
        if state is not None:
            self._watch.observe(state)

    def _await_channel(self, deadline: float | None) -> None:
        """Wait for the channel to be READY as long as the restart rule allows (`_base`)."""
        wait = self._watch.wait_before_attempt(deadline)
        if wait <= 0:
            return
        ready = grpc.channel_ready_future(self._channel)
        try:
            ready.result(timeout=wait)
            self._watch.observe(grpc.ChannelConnectivity.READY)
        except grpc.FutureTimeoutError:
            pass
        finally:
            ready.cancel()

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
            self._await_channel(deadline)
            try:
                return rpc(
                    request, timeout=self._attempt_timeout(deadline), metadata=self._metadata
                )
            except grpc.RpcError as exc:
                self._observe_now()
                delay = self._retry_delay(exc, attempt, deadline, idempotent)
                if delay is None:
                    raise failed(exc, method, request) from exc
                time.sleep(delay)

    def _pages(
        self,
        method: str,
        rpc: grpc.UnaryUnaryMultiCallable[Any, Any],
        request: Paged,
        items: Callable[[Any], Iterable[Item]],
        timeout: float | None,
    ) -> Iterator[Item]:
        while True:
            page: PageOf = self._unary(method, rpc, request, idempotent=True, timeout=timeout)
            yield from items(page)
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    def _stream(
        self,
        method: str,
        rpc: grpc.UnaryStreamMultiCallable[Any, Resp],
        request: Resumable,
        timeout: float | None,
    ) -> Iterator[Resp]:
        deadline = self._deadline(timeout, None)
        attempt = 0
        while True:
            attempt += 1
            self._await_channel(deadline)
            call = rpc(request, timeout=self._remaining(deadline), metadata=self._metadata)
            try:
                for item in call:
                    attempt = 0
                    cursor = getattr(item, "cursor", "")
                    if cursor:  # resume after the last delivered item on reconnect
                        request.cursor = cursor
                    if not is_position_marker(item):
                        yield item
                return
            except grpc.RpcError as exc:
                self._observe_now()
                if attempt == 0:  # it had delivered items: resume within a window from now
                    self._watch.stream_lost()
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
        graph: graph_pb2.GraphDraft | None = None,
        timeout: float | None = None,
        **fields: Unpack[DraftFields],
    ) -> memory_pb2.SaveMemoryResponse:
        """Store a memory (and what it asserts in the entity graph, see `graph_draft`);
        retried with one idempotency key (fresh unless given)."""
        request = self._requests.save(
            content, supersedes, fresh_idempotency_key(idempotency_key), fields, graph
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
        request = self._requests.get(id, time)
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
        graph: graph_pb2.GraphDraft | None = None,
        timeout: float | None = None,
        **fields: Unpack[DraftFields],
    ) -> memory_pb2.UpdateMemoryResponse:
        """Write a new version with the given fields changed (the update mask is derived;
        ``graph`` replaces what the memory asserts in the entity graph)."""
        request = self._requests.update(
            id, expected_version, fresh_idempotency_key(idempotency_key), fields, content, graph
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
        request = self._requests.forget(id, reason)
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
        min_relevance: float | None = None,
        timeout: float | None = None,
    ) -> memory_pb2.SearchMemoriesResponse:
        """Hybrid recall; hits come best first with their fused score. Nothing comes back
        when no hit's relevance reaches ``min_relevance`` (default: the server's floor)."""
        request = self._requests.search(
            query, limit, filter, time, mode, query_embedding, min_relevance
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
        request = self._requests.list(filter, time, page_size)
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
        request = self._requests.list_page(filter, time, page_size, page_token)
        return self._unary(
            "ListMemories", self._memory.ListMemories, request, idempotent=True, timeout=timeout
        )

    def history(
        self, id: str, *, timeout: float | None = None
    ) -> memory_pb2.GetMemoryHistoryResponse:
        """Every version of one memory, oldest first."""
        request = self._requests.history(id)
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
        request = self._requests.export(filter, cursor, include_history)
        return self._stream("ExportMemories", self._memory.ExportMemories, request, timeout)

    def watch(
        self,
        *,
        filter: common_pb2.MemoryFilter | None = None,
        cursor: str = "",
        include_documents: bool = False,
        document_collections: Iterable[str] = (),
        timeout: float | None = None,
    ) -> Iterator[memory_pb2.WatchMemoriesResponse]:
        """Stream changes as they happen (from now, or after `cursor`); close it to stop."""
        request = self._requests.watch(filter, cursor, include_documents, document_collections)
        return self._stream("WatchMemories", self._memory.WatchMemories, request, timeout)

    def build_context(
        self,
        query: str,
        *,
        token_budget: int = 0,
        max_memories: int = 0,
        filter: common_pb2.MemoryFilter | None = None,
        time: common_pb2.TimeTravel | None = None,
        knowledge_collections: Iterable[str] = (),
        exclude_knowledge: bool = False,
        timeout: float | None = None,
    ) -> memory_pb2.BuildContextResponse:
        """Pack the best matches for `query` into a prompt-ready block within `token_budget`:
        memories and, for keys with knowledge:read, chunks of documents (each item says which)."""
        request = self._requests.build_context(
            query, token_budget, max_memories, filter, time, knowledge_collections,
            exclude_knowledge,
        )  # fmt: skip
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
        graph: graph_pb2.GraphDraft | None = None,
        timeout: float | None = None,
        **fields: Unpack[DraftFields],
    ) -> review_pb2.ProposeMemoryResponse:
        """Store a candidate awaiting human review (its graph joins on approval); retried
        with one idempotency key."""
        request = self._requests.propose(
            content,
            reason,
            supersedes,
            review_within,
            fresh_idempotency_key(idempotency_key),
            fields,
            graph,
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
        request = self._requests.list_candidates(proposed_by, page_size)
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
        request = self._requests.withdraw(id, reason)
        return self._unary(
            "WithdrawCandidate",
            self._review.WithdrawCandidate,
            request,
            idempotent=False,
            timeout=timeout,
        )

    # -- KnowledgeService ------------------------------------------------------------------

    def search_knowledge(
        self,
        query: str,
        *,
        limit: int = 0,
        collections: Iterable[str] = (),
        lexical_only: bool = False,
        min_relevance: float | None = None,
        timeout: float | None = None,
    ) -> knowledge_pb2.SearchKnowledgeResponse:
        """Document chunks, best first; none below ``min_relevance`` (default: server's floor)."""
        request = self._requests.search_knowledge(
            query, limit, collections, lexical_only, min_relevance
        )
        return self._unary(
            "SearchKnowledge", self._knowledge.SearchKnowledge, request, idempotent=True,
            timeout=timeout,
        )  # fmt: skip

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

    # -- GraphService ----------------------------------------------------------------------

    def lookup_entity(
        self,
        name: str,
        *,
        time: common_pb2.TimeTravel | None = None,
        relation_limit: int = 0,
        timeout: float | None = None,
    ) -> graph_pb2.LookupEntityResponse:
        """An entity by name or alias and its relations (NotFound unless a memory the key
        can see asserts it)."""
        request = self._requests.lookup_entity(name, time, relation_limit)
        return self._unary(
            "LookupEntity", self._graph.LookupEntity, request, idempotent=True, timeout=timeout
        )

    def neighbours(
        self,
        name: str,
        *,
        depth: int = 1,
        time: common_pb2.TimeTravel | None = None,
        limit: int = 0,
        timeout: float | None = None,
    ) -> graph_pb2.ListNeighboursResponse:
        """Entities within ``depth`` (1-3) hops of one entity over relations the key can see."""
        request = self._requests.neighbours(name, depth, time, limit)
        return self._unary(
            "ListNeighbours", self._graph.ListNeighbours, request, idempotent=True,
            timeout=timeout,
        )  # fmt: skip

    def whoami(self, *, timeout: float | None = None) -> identity_pb2.WhoAmIResponse:
        """Who the key is: tenant, principal, permissions, confinement, allowed methods."""
        request = self._requests.whoami()
        return self._unary(
            "WhoAmI", self._identity.WhoAmI, request, idempotent=True, timeout=timeout
        )
