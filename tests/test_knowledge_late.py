"""Late interaction (docs: Knowledge base): the first chunks of an answered knowledge search
reordered by MaxSim of the query's token vectors to each chunk's stored ones, on by default.
The filler stores each chunk's small form with its vector; a delete erases it, a re-put
never keeps it, and a chunk without one keeps the search fused. Nothing here depends on
what the model thinks of particular strings: orders are set by forms a test writes, and
scores are checked against MaxSim computed from the stored bytes."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence

import numpy as np
import pytest

from brain.server.domain.knowledge import late
from brain.server.domain.retrieval.embedders import LocalEmbedder
from brain.v1 import knowledge_pb2

from .conftest import BrainServer, LoopThread, PgCluster, fillers_held, server_settings, unique
from .helpers import Api, check_off_unless_told_on
from .test_knowledge import ALL, delete_call, get_call, put, search

QUERY = "rotate the signing keys of the payments gateway"
# Six short documents sharing the query's words, so every search answers with five or more.
TEXTS = {
    f"doc{i}.md": f"# Gateway {i}\n\nThe payments gateway {word} the signing keys.\n"
    for i, word in enumerate(["rotates", "stores", "checks", "logs", "caches", "signs"])
}


def stored(server: BrainServer, chunk_ids: Sequence[str]) -> dict[str, bytes | None]:
    """The token_vectors column of these chunks, read as the owner."""
    rows = server.sql(
        "SELECT chunk_id::text AS id, token_vectors FROM document_chunks"
        " WHERE chunk_id = ANY($1::uuid[])",
        list(chunk_ids),
    )
    return {
        r["id"]: None if r["token_vectors"] is None else bytes(r["token_vectors"]) for r in rows
    }


def set_stored(server: BrainServer, forms: dict[str, bytes | None]) -> None:
    for chunk_id, form in forms.items():
        server.sql(
            "UPDATE document_chunks SET token_vectors = $2 WHERE chunk_id = $1::uuid",
            chunk_id, form,
        )  # fmt: skip


async def filled(server: BrainServer, api: Api, ids: Sequence[str]) -> None:
    """Wait until the server's filler has embedded every chunk of these documents, poking
    it as a put does (it waits for puts to be quiet, then idles up to 5 s between looks)."""
    filler = server.running.filler if server.running is not None else None
    for n in range(400):
        if all([(await get_call(api, i)).document.fully_embedded for i in ids]):
            return
        if filler is not None and n % 10 == 9:
            server.loop.loop.call_soon_threadsafe(filler.poke)
        await asyncio.sleep(0.05)
    raise AssertionError("the filler did not embed the documents")


_MODEL = LocalEmbedder()  # loaded once, on first use


async def query_form(text: str) -> np.ndarray:
    """The query's form as the server makes it (same model, same rule)."""
    [(_, rows, tokens)] = await _MODEL.embed_with_tokens([text])
    return late.query_form(rows, tokens)


def int8(rows: np.ndarray) -> bytes:
    return bytes(np.round(rows * 127).astype(np.int8).tobytes())


async def put_all(server: BrainServer, api: Api) -> list[str]:
    ids = [(await put(api, path, text)).document.id for path, text in TEXTS.items()]
    await filled(server, api, ids)
    return ids


def test_query_rows_leave_out_stop_words_and_punctuation_unless_nothing_is_left() -> None:
    assert late.query_rows(["what", "is", "the", "rollback", "time", "##out", "?"]) == [3, 4, 5]
    assert late.query_rows(["what", "is", "it", "?"]) == [0, 1, 2, 3]


def test_maxsim_averages_each_query_rows_best_cosine() -> None:
    q = np.eye(3, dtype=np.float32)[:2]
    p = np.array([[1, 0, 0], [0, 0.6, 0.8]], dtype=np.float32)
    assert late.maxsim(q, p) == pytest.approx((1.0 + 0.6) / 2)
    assert late.maxsim(q, p[:0]) == 0.0


def test_the_shipped_projection_is_orthonormal_128_by_384() -> None:
    """The projection is a package data file, not recomputed: 128 orthonormal rows."""
    p = late._projection()
    assert p.shape == (late.STORED_DIMS, 384) and p.dtype == np.float32
    assert np.allclose(p @ p.T, np.eye(late.STORED_DIMS), atol=1e-5)


def test_a_chunks_form_keeps_content_tokens_once_in_at_most_64_int8_rows() -> None:
    """Stop words, punctuation and repeated WordPieces are left out, at most 64 rows of
    128 int8 values (8 KB) are kept, each about unit length."""
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((300, 384)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    words = [f"w{i}" for i in range(200)] + ["the", ".", "of"] * 20 + ["w1"] * 40
    form = late.chunk_form(rows, words)
    assert len(form) == 64 * late.STORED_DIMS
    back = late.stored_rows(form)
    assert np.allclose(np.linalg.norm(back, axis=1), 1.0, atol=0.02)
    few = late.chunk_form(rows[:6], ["alpha", "beta", "alpha", "the", "?", "gamma"])
    assert len(few) == 3 * late.STORED_DIMS  # alpha, beta, gamma
    kept = late.stored_rows(few)
    expected = late.query_form(rows[[0, 1, 5]], ["alpha", "beta", "gamma"])
    assert np.allclose(kept, expected, atol=0.01)  # no clustering below 64: projected as is


def test_the_local_model_gives_vectors_and_token_vectors_from_one_run() -> None:
    """embed_with_tokens gives embed's vectors, and unit token vectors without the special
    tokens."""
    embedder = _MODEL
    texts = ["Roll back the deploy.", "a much longer text " * 5]
    (vector, rows, tokens), (_, more, _) = asyncio.run(embedder.embed_with_tokens(texts))
    assert np.allclose(vector, asyncio.run(embedder.embed(texts))[0], atol=1e-6)
    assert tokens == ["roll", "back", "the", "deploy", "."]
    assert rows.shape == (5, 384) and more.shape == (20, 384)
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)


def test_late_rerank_is_on_unless_the_server_is_told_off(monkeypatch: pytest.MonkeyPatch) -> None:
    check_off_unless_told_on(monkeypatch, "knowledge_late_rerank", default=True)


async def test_the_filler_stores_token_vectors_and_search_scores_by_them(
    brain_server: BrainServer,
) -> None:
    """Each chunk embedded by the filler holds its form (whole 128-byte rows, at most
    8 KB); an answered search is RERANKED with each of its first five hits' rerank_score the
    MaxSim of the query's form to that chunk's stored bytes, best first."""
    async with brain_server.channel() as channel:
        api = Api(channel, brain_server.mint_key(unique("late"), "w", permissions=ALL))
        await put_all(brain_server, api)
        found = await search(api, QUERY, min_relevance=0.0)
        assert found.ranking == knowledge_pb2.KNOWLEDGE_RANKING_RERANKED
        head = found.hits[: late.LATE_TOP]
        assert len(head) == late.LATE_TOP
        forms = stored(brain_server, [h.source.chunk_id for h in head])
        assert all(f and len(f) % late.STORED_DIMS == 0 and len(f) <= 8192 for f in forms.values())
        q = await query_form(QUERY)
        for h in head:
            expected = late.maxsim(q, late.stored_rows(forms[h.source.chunk_id] or b""))
            assert h.rerank_score == pytest.approx(expected, abs=2e-3)
        scores = [h.rerank_score for h in head]
        assert scores == sorted(scores, reverse=True)
        assert all(h.rerank_score == 0.0 for h in found.hits[late.LATE_TOP :])


async def test_stored_forms_set_the_order_and_a_chunk_without_one_keeps_it_fused(
    brain_server: BrainServer,
) -> None:
    """With one of the first five chunks' forms blanked the search is FUSED (hits by fused
    score, no rerank_score); given forms written here (the query's own rows for the fifth,
    one row opposite to their mean for the others) the fifth comes first and the other
    four, tied, keep their fused order."""
    async with brain_server.channel() as channel:
        api = Api(channel, brain_server.mint_key(unique("late"), "w", permissions=ALL))
        await put_all(brain_server, api)
        first = await search(api, QUERY, min_relevance=0.0)
        head = [h.source.chunk_id for h in first.hits[: late.LATE_TOP]]
        set_stored(brain_server, {head[0]: None})
        fused = await search(api, QUERY, min_relevance=0.0)
        assert fused.ranking == knowledge_pb2.KNOWLEDGE_RANKING_FUSED
        assert all(h.rerank_score == 0.0 for h in fused.hits)
        scores = [h.score for h in fused.hits]
        assert scores == sorted(scores, reverse=True)
        order = [h.source.chunk_id for h in fused.hits[: late.LATE_TOP]]
        assert set(order) == set(head)  # the same five: only their order had moved
        q = await query_form(QUERY)
        away = -q.sum(axis=0, keepdims=True)  # the query rows' mean cosine to it is < 0
        away /= np.linalg.norm(away)
        set_stored(brain_server, {c: int8(away) for c in order[:4]} | {order[4]: int8(q)})
        moved = await search(api, QUERY, min_relevance=0.0)
        assert moved.ranking == knowledge_pb2.KNOWLEDGE_RANKING_RERANKED
        assert [h.source.chunk_id for h in moved.hits[: late.LATE_TOP]] == [order[4], *order[:4]]
        assert moved.hits[0].rerank_score > 0.95 and moved.hits[1].rerank_score < 0.0
        assert [h.source.chunk_id for h in moved.hits[late.LATE_TOP :]] == [
            h.source.chunk_id for h in fused.hits[late.LATE_TOP :]
        ]


async def test_a_delete_erases_token_vectors_and_a_re_put_never_keeps_them(
    brain_server: BrainServer,
) -> None:
    """A re-put with other text drops the old version's forms and gets forms of its own
    text (none of the old bytes); a delete leaves no form on any row of any version."""
    async with brain_server.channel() as channel:
        api = Api(channel, brain_server.mint_key(unique("late"), "w", permissions=ALL))
        doc = (await put(api, "keys.md", TEXTS["doc0.md"])).document
        await filled(brain_server, api, [doc.id])

        def chunks() -> list[tuple[int, bytes | None]]:
            rows = brain_server.sql(
                "SELECT version, token_vectors FROM document_chunks WHERE document_id = $1::uuid",
                doc.id,
            )
            return [(r[0], None if r[1] is None else bytes(r[1])) for r in rows]

        v1 = [f for _, f in chunks()]
        assert v1 and all(v1)
        await put(api, "keys.md", "# Billing\n\nInvoices go out on the first of the month.\n")
        await filled(brain_server, api, [doc.id])
        after = chunks()
        assert [f for v, f in after if v == 1] == [None] * len(v1)
        v2 = [f for v, f in after if v == 2]
        assert v2 and all(v2) and not set(v2) & set(v1)
        await delete_call(api, doc.id)
        assert [f for _, f in chunks()] == [None] * len(after)
        assert not brain_server.sql(
            "SELECT 1 FROM document_chunks WHERE document_id = $1::uuid"
            " AND (token_vectors IS NOT NULL OR embedding IS NOT NULL)",
            doc.id,
        )


async def test_the_store_keeps_no_token_vectors_for_text_gone_meanwhile(
    brain_server: BrainServer,
) -> None:
    """The filler's two stores write a form only on the text it was made from, on a
    current chunk: a stale text, a retired chunk or an erased one gets none."""
    async with brain_server.channel() as channel:
        api = Api(channel, brain_server.mint_key(unique("late"), "w", permissions=ALL))
        doc = (await put(api, "gone.md", TEXTS["doc1.md"])).document
        await filled(brain_server, api, [doc.id])
        [row] = brain_server.sql(
            "SELECT tenant_id, chunk_id, content FROM document_chunks WHERE document_id = $1::uuid",
            doc.id,
        )
        tenant, chunk, content = row["tenant_id"], row["chunk_id"], row["content"]
        form = int8(np.eye(1, late.STORED_DIMS, dtype=np.float32))
        brain_server.sql(
            "UPDATE document_chunks SET token_vectors = NULL WHERE chunk_id = $1", chunk
        )
        backfill = "SELECT brain_store_chunk_token_vectors($1, $2, $3, $4)"
        assert brain_server.sql(backfill, tenant, chunk, content + " (stale)", form)[0][0] is False
        assert brain_server.sql(backfill, tenant, chunk, content, form)[0][0] is True  # control
        brain_server.sql(
            "UPDATE document_chunks SET token_vectors = NULL WHERE chunk_id = $1", chunk
        )
        await delete_call(api, doc.id)
        assert brain_server.sql(backfill, tenant, chunk, content, form)[0][0] is False
        assert brain_server.sql(backfill, tenant, chunk, "", form)[0][0] is False
        embed = "SELECT brain_store_chunk_embedding($1, $2, $3, $4::text::vector, 'local', $5)"
        vector = "[" + ",".join(["0.05"] * 384) + "]"
        assert brain_server.sql(embed, tenant, chunk, "", vector, form)[0][0] is False
        assert stored(brain_server, [str(chunk)]) == {str(chunk): None}


async def test_the_filler_backfills_chunks_embedded_before_token_vectors_were_stored(
    brain_server: BrainServer,
) -> None:
    """Chunks with a vector but no form (an upgrade) keep the search fused, and are counted
    by `brain-admin embeddings status`, until the filler's backfill stores their forms;
    then it is reranked again."""
    tenant = unique("late")
    async with brain_server.channel() as channel:
        api = Api(channel, brain_server.mint_key(tenant, "w", permissions=ALL))
        ids = await put_all(brain_server, api)

        def waiting() -> int:
            status = brain_server.admin("embeddings", "status", "--tenant", tenant, "--json")
            return int(json.loads(status.stdout)["chunks_token_vectors_pending"])

        rows = brain_server.sql(
            "SELECT chunk_id::text FROM document_chunks WHERE document_id = ANY($1::uuid[])",
            [uuid.UUID(i) for i in ids],
        )
        chunks = [r[0] for r in rows]
        with fillers_held():
            set_stored(brain_server, dict.fromkeys(chunks))
            found = await search(api, QUERY, min_relevance=0.0)
            assert found.ranking == knowledge_pb2.KNOWLEDGE_RANKING_FUSED
            assert waiting() == len(chunks)
            assert brain_server.running is not None and brain_server.running.filler is not None
            filler = brain_server.running.filler
            for _ in range(50):  # other tests' chunks may be claimed first
                if all(stored(brain_server, chunks).values()):
                    break
                assert brain_server.loop.run(filler.backfill_tokens())
        assert all(
            f and len(f) % late.STORED_DIMS == 0 for f in stored(brain_server, chunks).values()
        )
        again = await search(api, QUERY, min_relevance=0.0)
        assert again.ranking == knowledge_pb2.KNOWLEDGE_RANKING_RERANKED
        assert waiting() == 0


async def test_other_embedders_store_no_token_vectors_and_stay_fused(
    pg_cluster: PgCluster, loop_thread: LoopThread
) -> None:
    """With no model (lexical only) a search is FUSED and nothing is stored."""
    server = BrainServer(
        cluster=pg_cluster, loop=loop_thread, settings=server_settings(pg_cluster, embedder="none")
    )
    server.start()
    try:
        async with server.channel() as channel:
            api = Api(channel, server.mint_key(unique("late"), "w", permissions=ALL))
            ids = [(await put(api, path, text)).document.id for path, text in TEXTS.items()]
            found = await search(api, QUERY, min_relevance=0.0)
            assert found.ranking == knowledge_pb2.KNOWLEDGE_RANKING_FUSED
            assert len(found.hits) >= late.LATE_TOP
            assert not server.sql(
                "SELECT 1 FROM document_chunks WHERE document_id = ANY($1::uuid[])"
                " AND token_vectors IS NOT NULL",
                [uuid.UUID(i) for i in ids],
            )
    finally:
        server.stop()


async def test_a_chunk_a_key_cannot_see_moves_none_of_its_scores(
    walled_server: BrainServer,
) -> None:
    """A key holding only `team` gets the same hits, scores and rerank_scores whether or
    not an `hr` document (the query's own form written on its chunk) and another tenant's
    copy of it exist; a key holding `hr` (the positive control) gets that chunk first."""
    server = walled_server
    tenant = unique("late")
    async with server.channel() as channel:
        team = Api(channel, server.mint_key(tenant, "t", permissions=ALL))
        hr = Api(channel, server.mint_key(tenant, "h", permissions=ALL, labels=("team", "hr")))
        other = Api(channel, server.mint_key(unique("late"), "o", permissions=ALL))
        await put_all(server, team)

        def seen(found: knowledge_pb2.SearchKnowledgeResponse) -> list[tuple[str, float, float]]:
            # The fused score also weighs recency, which moves as time passes: to float32's
            # last digit here; everything else must be equal.
            return [
                (h.source.chunk_id, round(h.score, 5), h.lexical_score, h.semantic_similarity,
                 h.relevance, h.rerank_score)
                for h in found.hits
            ]  # fmt: skip

        before = await search(team, QUERY, min_relevance=0.0)
        assert before.ranking == knowledge_pb2.KNOWLEDGE_RANKING_RERANKED
        text = f"# Gateway\n\n{QUERY}: rotate the signing keys of the payments gateway.\n"
        secret = (await put(hr, "hr.md", text, labels=["hr"])).document
        copy = (await put(other, "hr.md", text)).document
        await asyncio.gather(filled(server, hr, [secret.id]), filled(server, other, [copy.id]))
        rows = server.sql(
            "SELECT chunk_id::text FROM document_chunks WHERE document_id = ANY($1::uuid[])",
            [uuid.UUID(secret.id), uuid.UUID(copy.id)],
        )
        form = int8(await query_form(QUERY))
        set_stored(server, {r[0]: form for r in rows})
        after = await search(team, QUERY, min_relevance=0.0)
        assert seen(after) == seen(before) and after.ranking == before.ranking
        control = await search(hr, QUERY, min_relevance=0.0)
        assert control.hits[0].source.document_id == secret.id
        assert control.hits[0].rerank_score > 0.95
