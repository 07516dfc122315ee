"""Query vectors: a small LRU cache per model, and concurrent queries embedded together.

Under load, embedding the query is the main cost of a hybrid search; a CPU model embeds a
batch of 16 in far less than 16 times one. So queries that arrive while the embedder is
busy wait for it and then go as one batch (no timer: an idle server embeds at once), an
identical text in flight is embedded once, and a repeated query is answered from the
cache. Cache and in-flight sharing are per tenant, keyed by (tenant, model, text): a hit
gives a caller the vector of a text its own tenant sent, and how fast a query is answered
never tells one tenant what another asked. Batching does mix tenants; each still gets only
its own text's vector.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict

from brain.server.domain.retrieval.embedders import Embedder, EmbedderError


class QueryVectors:
    """Vectors for query texts: cached, and batched per embedder."""

    def __init__(self, cache_size: int = 1024, max_batch: int = 32) -> None:
        self.cache_size = cache_size
        self.max_batch = max_batch
        self._cache: OrderedDict[tuple[str, str, str], tuple[float, ...]] = OrderedDict()
        self._batchers: dict[int, _Batcher] = {}

    async def vector(
        self, embedder: Embedder, model: str, text: str, *, tenant: str
    ) -> list[float]:
        """The vector of ``text`` by ``embedder`` (whose vectors ``model`` names), asked for
        by ``tenant``."""
        key = (tenant, model, text)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return list(cached)
        # A per-tenant embedder is resolved here, in the caller's request: the batch
        # drains in a task of its own.
        resolve = getattr(embedder, "resolve", None)
        embedder = resolve() if resolve is not None else embedder
        batcher = self._batchers.get(id(embedder))
        if batcher is None or batcher.embedder is not embedder:
            batcher = self._batchers[id(embedder)] = _Batcher(embedder, self.max_batch)
        vector = await batcher.embed(tenant, text)
        if self.cache_size > 0:
            self._cache[key] = tuple(vector)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return list(vector)


class _Batcher:
    """Texts waiting for one embedder; one drain task embeds them a batch at a time."""

    def __init__(self, embedder: Embedder, max_batch: int) -> None:
        self.embedder = embedder
        self.max_batch = max_batch
        self.pending: dict[tuple[str, str], asyncio.Future[list[float]]] = {}
        self.drain: asyncio.Task[None] | None = None

    async def embed(self, tenant: str, text: str) -> list[float]:
        """One tenant's text: an identical one of the same tenant in flight is shared."""
        key = (tenant, text)
        future = self.pending.get(key)
        if future is None:
            future = self.pending[key] = asyncio.get_running_loop().create_future()
            if self.drain is None or self.drain.done():
                self.drain = asyncio.create_task(self._drain())
        # A caller that gives up (deadline, cancel) must not cancel the others' batch.
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        while self.pending:
            batch = dict(itertools.islice(self.pending.items(), self.max_batch))
            for key in batch:
                del self.pending[key]
            try:
                # A model that reads queries its own way (e5's "query: ") says so.
                embed = getattr(self.embedder, "embed_queries", self.embedder.embed)
                vectors = await embed([text for _, text in batch])
            except EmbedderError as exc:
                for future in batch.values():
                    _fail(future, exc)
                continue
            except Exception as exc:  # an embedder outside this package broke its contract
                for future in batch.values():
                    _fail(future, EmbedderError(f"the embedder failed: {exc}"))
                continue
            if len(vectors) != len(batch):
                for future in batch.values():
                    _fail(future, EmbedderError("the embedder returned a vector count mismatch"))
                continue
            for future, vector in zip(batch.values(), vectors, strict=True):
                if not future.done():
                    future.set_result(vector)


def _fail(future: asyncio.Future[list[float]], exc: Exception) -> None:
    if not future.done():
        future.set_exception(exc)
