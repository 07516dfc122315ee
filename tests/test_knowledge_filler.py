"""Chunk vectors in the background (issue 31): a put commits its chunks without waiting for
the embedder; the server's filler embeds them in batches, retries a failing embedder with
backoff, never embeds a chunk twice across fillers and never stores a vector on text that
was deleted or replaced meanwhile.

Each test runs its own server with a real OpenAI-compatible endpoint on loopback (the toy
bag-of-words vectors), and the session server's filler is held for its duration, so no
other filler (of another model) reaches the chunks. Waits poll generously; nothing here
measures wall-clock time.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from brain.server.domain.knowledge.filler import ChunkFiller, FillerSettings
from brain.server.storage import setlocal
from brain.v1 import knowledge_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api, JsonEndpoint, serving
from .test_knowledge import (
    ALL,
    delete_call,
    found_paths,
    get_call,
    put,
    search,
    session_filler_held,
)
from .test_retrieval import toy_vector

QUICK = FillerSettings(
    batch=4, idle_seconds=0.2, lease_seconds=300, retry_base_seconds=0.1, retry_max_seconds=0.5
)
DOC = "# Backup\n\nThe backup job runs nightly.\n\n## Restore\n\nRestores are tested monthly.\n"


class Embeddings(JsonEndpoint):
    """Toy vectors; fails (500) while ``down`` and refuses (400) any call with a text
    holding ``refuse``; holds each call while ``gate`` is clear (``holding`` is set once a
    call waits there). Records every input text it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.gate = threading.Event()
        self.gate.set()
        self.holding = threading.Event()
        self.texts: list[str] = []
        self.lock = threading.Lock()
        self.refuse = ""
        # Every text gets one vector (each as close as can be), but a text holding
        # ``apart`` gets one of its own, 0.71 to the others' and 1 to its kind.
        self.alike = False
        self.apart = ""

    def answer(self, body: Any) -> tuple[int, Any] | None:
        if not self.gate.is_set():
            self.holding.set()
            self.gate.wait(30)
        if self.down:
            return 500, {"error": "down for maintenance"}
        if self.refuse and any(self.refuse in t for t in body["input"]):
            return 400, {"error": "input rejected"}
        with self.lock:
            self.texts.extend(body["input"])
        data = [
            {"index": i, "embedding": toy_vector(self.alikeness(t) if self.alike else t)}
            for i, t in enumerate(body["input"])
        ]
        return 200, {"data": data, "model": body["model"]}

    def alikeness(self, text: str) -> str:
        return "alike apart" if self.apart and self.apart in text else "alike"


@asynccontextmanager
async def toy_server(
    pg_cluster: PgCluster, loop_thread: LoopThread, embeddings: Embeddings
) -> AsyncIterator[BrainServer]:
    """A server embedding with ``embeddings``, its filler quick to retry."""
    server = BrainServer(
        cluster=pg_cluster, loop=loop_thread,
        settings=server_settings(pg_cluster, embedder="openai", openai_url=embeddings.url,
                                 openai_model="toy", embedding_dimension=384),
    )  # fmt: skip
    server.start()
    assert server.running is not None and server.running.filler is not None
    server.running.filler.settings = QUICK
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def quiet(brain_server: BrainServer) -> Iterator[None]:
    with session_filler_held(brain_server):
        yield


async def until(check: Callable[[], Any], what: str, tries: int = 300) -> None:
    """Poll ``check`` (sync or async) every 0.1 s, generously, until it is true."""
    for _ in range(tries):
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


def vectors(server: BrainServer, document_id: str) -> list[tuple[int, bool, str]]:
    """(version, has a vector, content) of every chunk of a document."""
    rows = server.sql(
        "SELECT version, embedding IS NOT NULL AS v, content FROM document_chunks "
        "WHERE document_id = $1 ORDER BY version, chunk_no",
        document_id,
    )
    return [(r["version"], r["v"], r["content"]) for r in rows]


def metric(outcome: str) -> float:
    from brain.server.telemetry import metrics

    return metrics.CHUNK_EMBEDDINGS.labels(outcome)._value.get()  # type: ignore[no-any-return]


async def test_put_returns_before_vectors_and_search_is_lexical_until_they_land(
    pg_cluster: PgCluster, loop_thread: LoopThread, quiet: None
) -> None:
    """With the embedder holding every call, a put still returns (no vector stored, not
    fully embedded) and lexical search finds it; once the embedder answers, the filler
    stores every chunk's vector and hybrid search ranks the chunk first semantically."""
    with serving(Embeddings()) as embeddings:
        embeddings.gate.clear()
        async with (
            toy_server(pg_cluster, loop_thread, embeddings) as server,
            server.channel() as channel,
        ):
            api = Api(channel, server.mint_key(unique("fill"), "w", permissions=ALL))
            doc = (await put(api, "backup.md", DOC)).document
            assert doc.chunk_count == 2 and not doc.fully_embedded
            assert [v for _, v, _ in vectors(server, doc.id)] == [False, False]
            assert await found_paths(api, "nightly backup", lexical_only=True) == {"backup.md"}
            await until(embeddings.holding.is_set, "the filler asks the embedder")
            embeddings.gate.set()

            async def landed() -> bool:
                return bool((await get_call(api, doc.id)).document.fully_embedded)

            await until(landed, "the chunks' vectors land")
            assert [v for _, v, _ in vectors(server, doc.id)] == [True, True]
            found = await search(api, "when are restores tested")
            assert found.lanes == knowledge_pb2.KNOWLEDGE_LANES_HYBRID
            assert found.hits[0].semantic_rank == 1
            assert "monthly" in found.hits[0].content


async def test_chunks_deleted_or_replaced_before_their_vector_lands_get_none(
    pg_cluster: PgCluster, loop_thread: LoopThread, quiet: None
) -> None:
    """A document deleted before the filler reaches it is never embedded; of a batch the
    filler holds at the embedder, a deleted document's and a replaced version's chunks get
    no vector (counted as discarded), while an untouched one and the new version get theirs
    (controls)."""
    with serving(Embeddings()) as embeddings:
        async with toy_server(pg_cluster, loop_thread, embeddings) as server:
            assert server.running is not None and server.running.filler is not None
            filler = server.running.filler
            server.loop.run(filler.stop())
            filler.settings = FillerSettings(batch=32, idle_seconds=0.2)
            async with server.channel() as channel:
                api = Api(channel, server.mint_key(unique("fill"), "w", permissions=ALL))
                kept = (await put(api, "kept.md", "# Kept\n\nkept text stays\n")).document
                gone = (await put(api, "gone.md", "# Gone\n\nthe vault code is 4321\n")).document
                old = (await put(api, "moved.md", "# Moved\n\nthe old address\n")).document
                early = (await put(api, "early.md", "# Early\n\nthe early secret\n")).document
                assert (await delete_call(api, early.id)).version == 2  # before any claim
                discarded = metric("discarded")
                embeddings.gate.clear()
                loop_thread.loop.call_soon_threadsafe(filler.start)
                await until(embeddings.holding.is_set, "the filler holds its batch")
                assert (await delete_call(api, gone.id)).version == 2
                new = (await put(api, "moved.md", "# Moved\n\nthe new address\n")).document
                assert new.version == 2
                embeddings.gate.set()

                async def settled() -> bool:
                    got = await get_call(api, kept.id), await get_call(api, new.id)
                    return all(g.document.fully_embedded for g in got)

                await until(settled, "the live chunks' vectors land")
                assert vectors(server, kept.id) == [(1, True, "# Kept\n\nkept text stays")]
                assert vectors(server, gone.id) == [(1, False, "")]  # erased, no vector
                assert vectors(server, early.id) == [(1, False, "")]
                assert vectors(server, old.id) == [
                    (1, False, "# Moved\n\nthe old address"),  # retired meanwhile
                    (2, True, "# Moved\n\nthe new address"),
                ]
                assert any("vault code" in t for t in embeddings.texts)  # it was in flight
                assert not any("early secret" in t for t in embeddings.texts)
                assert metric("discarded") >= discarded + 2


async def test_failing_embedder_leaves_chunks_pending_then_fills_every_one(
    pg_cluster: PgCluster, loop_thread: LoopThread, quiet: None
) -> None:
    """While the embedder fails, puts succeed, search answers lexically, the filler counts
    and backs off, and `brain-admin embeddings status` shows the chunks pending after a
    failure; once the embedder works every chunk gets its vector, none lost."""
    with serving(Embeddings()) as embeddings:
        embeddings.down = True
        async with (
            toy_server(pg_cluster, loop_thread, embeddings) as server,
            server.channel() as channel,
        ):
            tenant = unique("fill")
            api = Api(channel, server.mint_key(tenant, "w", permissions=ALL))
            failed = metric("failed")
            docs = [
                (await put(api, f"doc{n}.md", f"# Doc {n}\n\nnote {n}\n\n## More\n\nmore {n}\n"))
                for n in range(5)
            ]
            total = sum(d.document.chunk_count for d in docs)
            assert total == 10

            def retried() -> bool:
                rows = server.sql(
                    "SELECT count(*) AS n FROM document_chunks c JOIN tenants t USING "
                    "(tenant_id) WHERE t.name = $1 AND c.embed_attempts >= 2",
                    tenant,
                )
                return bool(rows[0]["n"] == total)

            await until(retried, "every chunk failed twice")
            assert metric("failed") >= failed + 2 * total
            down = await search(api, "note 3")
            assert down.lanes == knowledge_pb2.KNOWLEDGE_LANES_LEXICAL_EMBEDDER_UNAVAILABLE
            assert down.hits and down.hits[0].source.path == "doc3.md"
            status = server.admin("embeddings", "status", "--tenant", tenant).stdout
            assert "0 document chunks embedded, 10 pending (10 after a failed" in status
            assert "one failed" in status and "the oldest pending chunk has waited" in status
            report = json.loads(
                server.admin("embeddings", "status", "--tenant", tenant, "--json").stdout
            )
            assert report["chunks_pending"] == report["chunks_retrying"] == 10
            assert report["chunks_most_failed_attempts"] >= 2
            embeddings.down = False

            async def all_embedded() -> bool:
                got = [await get_call(api, d.document.id) for d in docs]
                return all(g.document.fully_embedded for g in got)

            await until(all_embedded, "every chunk's vector lands")
            status = server.admin("embeddings", "status", "--tenant", tenant).stdout
            assert "10 document chunks embedded, 0 pending" in status
            assert "oldest" not in status  # nothing waits: nothing to report (control)
            up = await search(api, "note 3")
            assert up.lanes == knowledge_pb2.KNOWLEDGE_LANES_HYBRID


async def test_two_fillers_never_embed_one_chunk_twice(
    pg_cluster: PgCluster, loop_thread: LoopThread, quiet: None
) -> None:
    """Two servers on one database (as two workers are) fill 24 pending chunks together:
    each chunk reaches the embedder exactly once, as its heading path then its text, and
    every chunk gets its vector."""
    with serving(Embeddings()) as embeddings:
        async with (
            toy_server(pg_cluster, loop_thread, embeddings) as one,
            toy_server(pg_cluster, loop_thread, embeddings) as two,
        ):
            fillers = [s.running.filler for s in (one, two) if s.running is not None]
            for filler in fillers:
                assert isinstance(filler, ChunkFiller)
                one.loop.run(filler.stop())
                filler.settings = FillerSettings(batch=3, idle_seconds=0.05)
            async with one.channel() as channel:
                api = Api(channel, one.mint_key(unique("fill"), "w", permissions=ALL))
                docs = [
                    (await put(api, f"d{n}.md", f"# D{n}\n\nfirst {n}\n\n## S\n\nsecond {n}\n"))
                    for n in range(12)
                ]
                texts = {
                    f"{' > '.join(r['heading_path'])}\n{r['content']}"
                    for d in docs
                    for r in one.sql(
                        "SELECT heading_path, content FROM document_chunks WHERE document_id = $1",
                        d.document.id,
                    )
                }
                assert len(texts) == 24 and "D3 > S\n## S\n\nsecond 3" in texts
                for filler in fillers:
                    loop_thread.loop.call_soon_threadsafe(filler.start)

                async def all_embedded() -> bool:
                    got = [await get_call(api, d.document.id) for d in docs]
                    return all(g.document.fully_embedded for g in got)

                await until(all_embedded, "both fillers embed every chunk")
            mine = [t for t in embeddings.texts if t in texts]
            assert sorted(mine) == sorted(texts)  # each exactly once


async def test_filler_columns_are_behind_row_level_security_and_its_doors_are_narrow(
    pg_cluster: PgCluster, loop_thread: LoopThread, quiet: None
) -> None:
    """The app role sees and changes the filler's columns (embed_after, embed_attempts) of
    its transaction's tenant only; the filler's four functions are executable by the app
    role alone (not PUBLIC), and a claim never returns an erased chunk."""
    import asyncpg

    with serving(Embeddings()) as embeddings:
        embeddings.down = True
        async with toy_server(pg_cluster, loop_thread, embeddings) as server:
            assert server.running is not None and server.running.filler is not None
            server.loop.run(server.running.filler.stop())
            async with server.channel() as channel:
                mine, theirs = unique("fill"), unique("fill")
                a = Api(channel, server.mint_key(mine, "w", permissions=ALL))
                b = Api(channel, server.mint_key(theirs, "w", permissions=ALL))
                await put(a, "a.md", "# A\n\nalpha text\n")
                erased = (await put(b, "b.md", "# B\n\nbravo secret\n")).document
                await put(b, "b2.md", "# B2\n\nbravo other\n")
                await delete_call(b, erased.id)
            ids = {
                r["name"]: str(r["tenant_id"])
                for r in server.sql(
                    "SELECT name, tenant_id FROM tenants WHERE name = ANY($1::text[])",
                    [mine, theirs],
                )
            }

            async def probe() -> tuple[list[str], int, int, list[str]]:
                conn = await asyncpg.connect(pg_cluster.app_dsn)
                try:
                    async with conn.transaction():
                        # As the server sets them (SET LOCAL reaches Citus's workers).
                        await setlocal.set_local(
                            conn, {"brain.tenant_id": ids[mine], "brain.labels": "{team}"}
                        )
                        seen = await conn.fetch(
                            "SELECT tenant_id::text, embed_attempts, embed_after "
                            "FROM document_chunks"
                        )
                        changed = await conn.execute(
                            "UPDATE document_chunks SET embed_attempts = 99 "
                            "WHERE tenant_id = $1::uuid",
                            ids[theirs],
                        )
                        changed_rows = int(changed.split()[-1])
                    async with conn.transaction():
                        none = await conn.fetchval("SELECT count(*) FROM document_chunks")
                    claimed = await conn.fetch(
                        "SELECT * FROM brain_claim_chunk_embeddings(1000, 60, 0, 0)"
                    )
                    await conn.execute(  # give them back: other tests' chunks may be among them
                        "SELECT brain_release_chunk_embeddings($1, $2, false, 0, 0)",
                        [r["tenant_id"] for r in claimed], [r["chunk_id"] for r in claimed],
                    )  # fmt: skip
                    return (
                        [r["tenant_id"] for r in seen],
                        changed_rows,
                        none,
                        [r["content"] for r in claimed if str(r["tenant_id"]) == ids[theirs]],
                    )
                finally:
                    await conn.close()

            seen, changed, none, claimed = loop_thread.run(probe())
            assert seen == [ids[mine]]  # its own chunk, not the other tenant's
            assert changed == 0 and none == 0
            assert claimed == ["# B2\n\nbravo other"]  # pending, not the erased one
            public = server.sql(
                "SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') AS pub, "
                "has_function_privilege('brain_app', p.oid, 'EXECUTE') AS app "
                "FROM pg_proc p WHERE p.proname LIKE 'brain\\_%chunk\\_embedding%'"
                " OR p.proname LIKE 'brain\\_%chunk\\_token\\_vectors'"
            )
            assert sorted(r["proname"] for r in public) == [
                "brain_chunk_embedding_headings", "brain_claim_chunk_embeddings",
                "brain_claim_chunk_token_vectors", "brain_release_chunk_embeddings",
                "brain_store_chunk_embedding",  # with token vectors (0065), and without
                "brain_store_chunk_embedding", "brain_store_chunk_token_vectors",
            ]  # fmt: skip
            assert all(r["app"] and not r["pub"] for r in public)


async def test_a_text_the_embedder_refuses_does_not_hold_back_its_batch(
    pg_cluster: PgCluster, loop_thread: LoopThread, quiet: None
) -> None:
    """An embedder that refuses one chunk's text fails the whole batch; retried, the chunks
    go one at a time, so the others get their vectors while the refused one stays pending
    (retried with backoff), and gets its vector once the embedder takes it."""
    with serving(Embeddings()) as embeddings:
        embeddings.refuse = "poison"
        async with toy_server(pg_cluster, loop_thread, embeddings) as server:
            assert server.running is not None and server.running.filler is not None
            filler = server.running.filler
            server.loop.run(filler.stop())
            filler.settings = FillerSettings(
                batch=32, idle_seconds=0.1, retry_base_seconds=0.1, retry_max_seconds=0.3
            )
            async with server.channel() as channel:
                api = Api(channel, server.mint_key(unique("fill"), "w", permissions=ALL))
                text = "# A\n\nalpha fine\n\n## B\n\nthe poison pill\n\n## C\n\ncharlie fine\n"
                doc = (await put(api, "mixed.md", text)).document
                assert doc.chunk_count == 3
                loop_thread.loop.call_soon_threadsafe(filler.start)

                def state() -> list[tuple[bool, int]]:
                    rows = server.sql(
                        "SELECT embedding IS NOT NULL AS v, embed_attempts AS n "
                        "FROM document_chunks WHERE document_id = $1 ORDER BY chunk_no",
                        doc.id,
                    )
                    return [(r["v"], r["n"]) for r in rows]

                def others_filled() -> bool:
                    now = state()
                    return now[0][0] and now[2][0] and not now[1][0] and now[1][1] >= 2

                await until(others_filled, "the other chunks filled, the refused one retried")
                embeddings.refuse = ""

                async def landed() -> bool:
                    return bool((await get_call(api, doc.id)).document.fully_embedded)

                await until(landed, "the refused chunk's vector lands once it is taken")


async def test_fillers_give_way_to_ingest_for_a_bounded_time(
    pg_cluster: PgCluster, loop_thread: LoopThread, quiet: None
) -> None:
    """While chunks keep being committed (here: one within ``quiet_seconds``, an hour) the
    filler claims nothing younger than ``yield_seconds``, so ingest commits at the
    database's pace; once a chunk has waited that long it is claimed however busy ingest
    is."""
    with serving(Embeddings()) as embeddings:
        async with toy_server(pg_cluster, loop_thread, embeddings) as server:
            assert server.running is not None and server.running.filler is not None
            filler = server.running.filler
            filler.settings = FillerSettings(
                idle_seconds=0.1, quiet_seconds=3600, yield_seconds=3600
            )
            async with server.channel() as channel:
                api = Api(channel, server.mint_key(unique("fill"), "w", permissions=ALL))
                doc = (await put(api, "wait.md", "# Wait\n\nwaits its turn\n")).document
                await asyncio.sleep(1.0)
                assert vectors(server, doc.id) == [(1, False, "# Wait\n\nwaits its turn")]
                assert not any("waits its turn" in t for t in embeddings.texts)
                filler.settings = FillerSettings(
                    idle_seconds=0.1, quiet_seconds=3600, yield_seconds=0.2
                )

                async def landed() -> bool:
                    return bool((await get_call(api, doc.id)).document.fully_embedded)

                await until(landed, "the chunk claimed once it waited yield_seconds")
