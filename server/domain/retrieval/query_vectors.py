"""Query vectors: a small LRU cache per model, and concurrent queries embedded together.

Under load, embedding the query is the main cost of a hybrid search; a CPU model embeds a
batch of 16 in far less than 16 times one. So queries that arrive while the embedder is
busy wait for it and then go as one batch (no timer: an idle server embeds at once), an
identical text in flight is embedded once, and a repeated query is answered from the
cache. Cache and in-flight sharing are per tenant, keyed by (tenant, model, text): a hit
gives a caller the vector of a text its own tenant sent, and how fast a query is answered
never tells one tenant what another asked. Batching does mix tenants; each still gets only
its own text's vector.

With a `token_form` set (knowledge search sets late interaction's), an embedder that can be
read token by token (``embed_with_tokens``, the local one) gives a query's token vectors
from the same model run as its vector; their form is kept beside the vector (`tokens`), so
late interaction costs a search no second run.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from brain.server.domain.retrieval.embedders import Embedder, EmbedderError

# A query's token vectors and tokens -> what is kept of them (None: nothing).
TokenForm = Callable[[npt.NDArray[np.float32], list[str]], Any]
# A query's vector and the form of its token vectors (None without them).
_Entry = tuple[tuple[float, ...], Any]


class QueryVectors:
    """Vectors for query texts: cached, and batched per embedder."""

    def __init__(self, cache_size: int = 1024, max_batch: int = 32) -> None:
        self.cache_size = cache_size
        self.max_batch = max_batch
        self._cache: OrderedDict[tuple[str, str, str], _Entry] = OrderedDict()
        self._batchers: dict[int, _Batcher] = {}
        self.token_form: TokenForm | None = None

    async def vector(
        self, embedder: Embedder, model: str, text: str, *, tenant: str
    ) -> list[float]:
        """The vector of ``text`` by ``embedder`` (whose vectors ``model`` names), asked for
        by ``tenant``."""
        return (await self.embedded(embedder, model, text, tenant=tenant))[0]

    async def embedded(
        self, embedder: Embedder, model: str, text: str, *, tenant: str
    ) -> tuple[list[float], Any]:
        """`vector`, and the token form kept with it (None when there is none)."""
        key = (tenant, model, text)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return list(cached[0]), cached[1]
        # A per-tenant embedder is resolved here, in the caller's request: the batch
        # drains in a task of its own.
        resolve = getattr(embedder, "resolve", None)
        embedder = resolve() if resolve is not None else embedder
        batcher = self._batchers.get(id(embedder))
        form = self.token_form
        if batcher is None or batcher.embedder is not embedder or batcher.form is not form:
            batcher = self._batchers[id(embedder)] = _Batcher(embedder, self.max_batch, form)
        entry = await batcher.embed(tenant, text)
        if self.cache_size > 0:
            self._cache[key] = entry
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return list(entry[0]), entry[1]


class _Batcher:
    """Texts waiting for one embedder; one drain task embeds them a batch at a time."""

    def __init__(self, embedder: Embedder, max_batch: int, form: TokenForm | None) -> None:
        self.embedder = embedder
        self.max_batch = max_batch
        self.form = form
        self.pending: dict[tuple[str, str], asyncio.Future[_Entry]] = {}
        self.drain: asyncio.Task[None] | None = None

    async def embed(self, tenant: str, text: str) -> _Entry:
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
                entries = await self._embedded([text for _, text in batch])
            except EmbedderError as exc:
                for future in batch.values():
                    _fail(future, exc)
                continue
            except Exception as exc:  # an embedder outside this package broke its contract
                for future in batch.values():
                    _fail(future, EmbedderError(f"the embedder failed: {exc}"))
                continue
            if len(entries) != len(batch):
                for future in batch.values():
                    _fail(future, EmbedderError("the embedder returned a vector count mismatch"))
                continue
            for future, entry in zip(batch.values(), entries, strict=True):
                if not future.done():
                    future.set_result(entry)

    async def _embedded(self, texts: list[str]) -> list[_Entry]:
        """Each text's vector, with its token form when there is a form to keep and the
        embedder gives token vectors (from the same run)."""
        with_tokens = getattr(self.embedder, "embed_with_tokens", None)
        if self.form is not None and with_tokens is not None:
            form = self.form
            return [(tuple(v), form(rows, tokens)) for v, rows, tokens in await with_tokens(texts)]
        # A model that reads queries its own way (e5's "query: ") says so.
        embed = getattr(self.embedder, "embed_queries", self.embedder.embed)
        return [(tuple(v), None) for v in await embed(texts)]


def _fail(future: asyncio.Future[_Entry], exc: Exception) -> None:
    if not future.done():
        future.set_exception(exc)
