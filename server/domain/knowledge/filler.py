"""The chunk-vector filler: embeds, in the background, the chunks a put stored without vectors.

A put commits a document's chunks at once (lexically searchable) and pokes the filler of
its process; the filler claims pending chunks in batches (every tenant's, through the
functions of migrations 0032, 0035 and 0040), embeds each one's heading path and text
(``measures.embedding_text``) and stores each vector only while its chunk still holds the
text it was made from. Semantic search misses a chunk until then.

Fillers give way to ingest: while chunks keep being committed anywhere on the database
(one within ``quiet_seconds``), they claim only chunks that have waited ``yield_seconds``,
so a bulk ingest commits at the pace of the database and the embeddings catch up once it
is quiet, and an endless stream of puts cannot starve them. One filler runs per server
process. Claims are leases taken with ``FOR UPDATE SKIP LOCKED``, so the workers of a
server never embed one chunk at the same time, and a filler that dies loses nothing: its
lease runs out and another takes the chunks. A failing embedder (or database) is logged,
counted in ``brain_chunk_embeddings_total{outcome="failed"}``, and retried with
exponential backoff, per chunk and for the filler as a whole (chunks that failed before go
one at a time, so a text the embedder refuses holds back no other); a chunk stays pending
until its vector lands (`brain-admin embeddings status`).

With the local embedder the same model run also gives each chunk's token vectors, and
their small form for late interaction (`late.chunk_form`) is stored with the vector, under
the same check. Chunks embedded before that was stored (an upgrade) get it from the
backfill: when a filler finds nothing pending, it claims a batch of chunks that have a
local vector but no token vectors (never while ingest is committing), embeds them again
and stores only the token vectors, each still on the text it was made from; a failure
waits out the claim's lease. Until then such chunks keep the fused order in a search.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import asyncpg
import structlog

from brain.server.domain.knowledge import late
from brain.server.domain.knowledge.measures import embedding_text
from brain.server.domain.retrieval.embedders import Embedded, Embedder, EmbedderError
from brain.server.domain.retrieval.routing import model_of, per_tenant
from brain.server.storage import chunk_vectors as sql
from brain.server.telemetry import metrics

_log = structlog.get_logger("brain.knowledge.filler")


@dataclass(frozen=True)
class FillerSettings:
    batch: int = 32  # chunks per claim and per embedder call
    idle_seconds: float = 5.0  # between looks for work when no put pokes the filler
    lease_seconds: float = 300.0  # how long a claim keeps other fillers off its chunks
    retry_base_seconds: float = 2.0  # the first backoff after a failure, doubled per failure
    retry_max_seconds: float = 300.0  # the longest backoff
    quiet_seconds: float = 0.5  # since the last chunk committed, before claiming any
    yield_seconds: float = 60.0  # the longest a chunk waits for ingest to be quiet


class ChunkFiller:
    """Fills chunk vectors in the background of one server process."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        embedder: Embedder,
        model: str | None,
        settings: FillerSettings | None = None,
    ) -> None:
        self.pool = pool
        self.embedder = embedder
        self.model = model
        self.settings = settings or FillerSettings()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failures = 0  # consecutive failed rounds, for the filler's own backoff

    def start(self) -> None:
        self._wake.set()  # look at once: chunks may be pending from before this start
        self._task = asyncio.create_task(self._run(), name="chunk-vector-filler")

    def poke(self) -> None:
        """New chunks are pending (a put committed): look now, unless backing off."""
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            s = self.settings
            try:
                filled = await self.fill_once()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                filled = False
                self._failed(exc, "database")
            if self._failures:
                delay = min(s.retry_max_seconds, s.retry_base_seconds * 2 ** (self._failures - 1))
                await asyncio.sleep(delay)  # a put's poke does not cut a backoff short
            elif not filled:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), s.idle_seconds)
                if self._wake.is_set():  # a put committed: claim once it has been quiet
                    await asyncio.sleep(s.quiet_seconds)
            self._wake.clear()

    async def fill_once(self) -> bool:
        """Claim one batch, embed it and store what is still current; False when nothing
        was due. A failing embedder gives the batch back with its backoff."""
        s = self.settings
        self._wake.clear()
        claimed = await sql.claim(
            self.pool, s.batch, s.lease_seconds, s.quiet_seconds, s.yield_seconds
        )
        if not claimed:
            self._failures = 0
            return await self.backfill_tokens()
        try:
            if len(claimed) > 1 and min(c.attempts for c in claimed) > 0:
                # Every chunk here failed before: one at a time, so that a text the
                # embedder refuses does not hold back the chunks it was batched with.
                for one in claimed:
                    await self.embed_and_store([one])
            else:
                await self.embed_and_store(claimed)
        except asyncio.CancelledError:  # stopping: hand the batch to the next filler now
            with contextlib.suppress(Exception):
                await asyncio.shield(sql.release(self.pool, claimed, failed=False))
            raise
        return True

    async def embed_and_store(self, claimed: list[sql.Claimed]) -> None:
        """Embed and store ``claimed``, each tenant's chunks with its embedder (see
        `routing`); a failing embedder gives them back with backoff."""
        routes = per_tenant(self.embedder, self.model, [c.tenant_id for c in claimed])
        for tenant, (embedder, model) in routes.items():
            await self._embed_and_store(
                embedder, model, [c for c in claimed if str(c.tenant_id) == tenant]
            )

    async def _embed_and_store(
        self, embedder: Embedder, model: str | None, claimed: list[sql.Claimed]
    ) -> None:
        s = self.settings
        if embedder.dimension == 0:  # a tenant without vectors: nothing to fill
            await sql.release(
                self.pool, claimed, failed=True,
                base_seconds=s.retry_max_seconds, max_seconds=s.retry_max_seconds,
            )  # fmt: skip
            return
        texts = [embedding_text(c.heading_path, c.content) for c in claimed]
        forms: list[bytes | None] | None = None
        try:
            with_tokens = getattr(embedder, "embed_with_tokens", None)
            if with_tokens is not None:  # one model run: the vectors and the token vectors
                embedded: list[Embedded] = await with_tokens(texts)
                vectors = [vector for vector, _, _ in embedded]
                forms = [late.chunk_form(rows, tokens) for _, rows, tokens in embedded]
            else:
                vectors = await embedder.embed(texts)
        except EmbedderError as exc:
            self._failed(exc, "embedder", len(claimed))
            await sql.release(
                self.pool, claimed, failed=True,
                base_seconds=s.retry_base_seconds, max_seconds=s.retry_max_seconds,
            )  # fmt: skip
            return
        stored = await sql.store(self.pool, claimed, vectors, model, forms)
        self._failures = 0
        metrics.CHUNK_EMBEDDINGS.labels("stored").inc(stored)
        # Retired or erased while the embedder ran: no vector for text that is gone.
        metrics.CHUNK_EMBEDDINGS.labels("discarded").inc(len(claimed) - stored)

    async def backfill_tokens(self) -> bool:
        """Store the token vectors of one batch of chunks embedded without them (by a
        release before they were stored); False when there were none or no local model
        to make them. Each tenant's chunks with its own embedder: one that gives no token
        vectors stores an empty form, so its chunks are not claimed again."""
        s = self.settings
        model = self._token_model()
        if model is None:
            return False
        claimed = await sql.claim_token_backfill(
            self.pool, s.batch, s.lease_seconds, s.quiet_seconds, model
        )
        if not claimed:
            return False
        routes = per_tenant(self.embedder, self.model, [c.tenant_id for c in claimed])
        for tenant, (embedder, _) in routes.items():
            mine = [c for c in claimed if str(c.tenant_id) == tenant]
            with_tokens = getattr(embedder, "embed_with_tokens", None)
            forms = [b""] * len(mine)
            if with_tokens is not None:
                texts = [embedding_text(c.heading_path, c.content) for c in mine]
                try:
                    embedded: list[Embedded] = await with_tokens(texts)
                except EmbedderError as exc:  # the lease runs out; tried again then
                    _log.warning("backfilling token vectors failed", error=str(exc))
                    continue
                forms = [late.chunk_form(rows, tokens) for _, rows, tokens in embedded]
            await sql.store_token_vectors(self.pool, mine, forms)
        return True

    def _token_model(self) -> str | None:
        """The model whose chunk vectors have token vectors to backfill: the local one,
        when this filler's embedder (or a tenant's) is it."""
        embedders = [self.embedder, *getattr(self.embedder, "by_tenant_id", {}).values()]
        embedders += [getattr(self.embedder, "default", self.embedder)]
        for embedder in embedders:
            if hasattr(embedder, "embed_with_tokens") and embedder.dimension:
                return model_of(embedder)
        return None

    def _failed(self, exc: BaseException, what: str, chunks: int = 0) -> None:
        self._failures += 1
        metrics.CHUNK_EMBEDDINGS.labels("failed").inc(chunks)
        _log.warning(
            "filling chunk vectors failed; will retry",
            failed=what, chunks=chunks, consecutive_failures=self._failures, error=str(exc),
        )  # fmt: skip
