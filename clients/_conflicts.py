# Like _async.py: the client's methods take a per-call timeout, as the blocking ones do.
# ruff: noqa: ASYNC109
"""Conflicts and consolidation (issue 30) for both clients: list the conflicts between
memories the key can see, resolve one, and propose consolidations of restatements.

Mixed into `BrainClient` and `AsyncBrainClient`, which provide the request builder, the
ReviewService stub and the call machinery (retries, deadlines, paging)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from brain.clients._requests import Decision, Requests
from brain.v1 import common_pb2, review_pb2


class ConflictMethods:
    """The blocking client's conflict methods."""

    _requests: Requests
    _review: Any  # the ReviewService stub (blocking or asyncio)

    if TYPE_CHECKING:

        def _unary(self, method: str, rpc: Any, request: Any, *, idempotent: bool,
                   timeout: float | None) -> Any: ...  # fmt: skip

        def _pages(self, method: str, rpc: Any, request: Any, items: Any,
                   timeout: float | None) -> Iterator[Any]: ...  # fmt: skip

    def list_conflicts(
        self,
        *,
        memory_id: str = "",
        states: Iterable[common_pb2.ConflictState.ValueType] = (),
        page_size: int = 0,
        timeout: float | None = None,
    ) -> Iterator[common_pb2.Conflict]:
        """Conflicts between memories this key can see both of (default: open ones), newest
        first, page by page; `memory_id` narrows to one memory's."""
        request = self._requests.list_conflicts(memory_id, states, page_size)
        return self._pages(
            "ListConflicts", self._review.ListConflicts, request, lambda p: p.conflicts, timeout
        )

    def resolve_conflict(
        self, id: str, decision: Decision, *, reason: str, timeout: float | None = None
    ) -> review_pb2.ResolveConflictResponse:
        """Approve (the older memory is superseded by the newer) or reject (both stand, for
        good) a conflict; needs memories:review and another principal; never retried."""
        request = self._requests.resolve_conflict(id, decision, reason)
        return self._unary(  # type: ignore[no-any-return]
            "ResolveConflict", self._review.ResolveConflict, request, idempotent=False,
            timeout=timeout,
        )  # fmt: skip

    def consolidate(
        self,
        *,
        min_overlap: float | None = None,
        max_clusters: int = 0,
        dry_run: bool = False,
        reason: str = "",
        timeout: float | None = None,
    ) -> review_pb2.ConsolidateMemoriesResponse:
        """Cluster restatements in the scope's namespace and propose one consolidated
        candidate per cluster (`dry_run`: only list the clusters); never retried."""
        request = self._requests.consolidate(min_overlap, max_clusters, dry_run, reason)
        return self._unary(  # type: ignore[no-any-return]
            "ConsolidateMemories", self._review.ConsolidateMemories, request,
            idempotent=dry_run, timeout=timeout,
        )  # fmt: skip


class AsyncConflictMethods:
    """The asyncio client's conflict methods: the same, awaited."""

    _requests: Requests
    _review: Any  # the ReviewService stub (blocking or asyncio)

    if TYPE_CHECKING:

        async def _unary(self, method: str, rpc: Any, request: Any, *, idempotent: bool,
                         timeout: float | None) -> Any: ...  # fmt: skip

        def _pages(self, method: str, rpc: Any, request: Any, items: Any,
                   timeout: float | None) -> AsyncIterator[Any]: ...  # fmt: skip

    def list_conflicts(
        self,
        *,
        memory_id: str = "",
        states: Iterable[common_pb2.ConflictState.ValueType] = (),
        page_size: int = 0,
        timeout: float | None = None,
    ) -> AsyncIterator[common_pb2.Conflict]:
        """Conflicts between memories this key can see both of (default: open ones)."""
        request = self._requests.list_conflicts(memory_id, states, page_size)
        return self._pages(
            "ListConflicts", self._review.ListConflicts, request, lambda p: p.conflicts, timeout
        )

    async def resolve_conflict(
        self, id: str, decision: Decision, *, reason: str, timeout: float | None = None
    ) -> review_pb2.ResolveConflictResponse:
        """Approve or reject a conflict; never retried."""
        request = self._requests.resolve_conflict(id, decision, reason)
        return await self._unary(  # type: ignore[no-any-return]
            "ResolveConflict", self._review.ResolveConflict, request, idempotent=False,
            timeout=timeout,
        )  # fmt: skip

    async def consolidate(
        self,
        *,
        min_overlap: float | None = None,
        max_clusters: int = 0,
        dry_run: bool = False,
        reason: str = "",
        timeout: float | None = None,
    ) -> review_pb2.ConsolidateMemoriesResponse:
        """Propose consolidated candidates for clusters of restatements; never retried."""
        request = self._requests.consolidate(min_overlap, max_clusters, dry_run, reason)
        return await self._unary(  # type: ignore[no-any-return]
            "ConsolidateMemories", self._review.ConsolidateMemories, request,
            idempotent=dry_run, timeout=timeout,
        )  # fmt: skip
