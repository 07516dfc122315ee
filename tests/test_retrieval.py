"""Hybrid retrieval: fusion and floor rules, filtered HNSW scans, embedder outages and backfill."""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import asyncpg
import grpc
import pytest

from brain.server.domain.retrieval.lanes import LaneHit, RetrievalParams, boost, fuse
from brain.v1 import common_pb2, memory_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SEED_ROWS = 1000  # a tenth of them in the caller's bucket


def row(name: str, importance: float = 0.5, age_days: float = 365) -> dict[str, Any]:
    return {
        "memory_id": name,
        "version": 1,
        "importance": importance,
        "recorded_at": NOW - timedelta(days=age_days),
    }


def ids(hits: list[Any]) -> list[str]:
    return [h.row["memory_id"] for h in hits]


def test_fusion_rewards_agreement_between_lanes() -> None:
    """A row both lanes rank well beats rows only one lane likes."""
    params = RetrievalParams(fusion="minmax")
    lexical = [LaneHit(row("a"), 9.0), LaneHit(row("both"), 8.5), LaneHit(row("c"), 1.0)]
    semantic = [LaneHit(row("b"), 0.80), LaneHit(row("both"), 0.78), LaneHit(row("d"), 0.40)]
    assert ids(fuse(lexical, semantic, 3, params, NOW)) == ["both", "a", "b"]


def test_fusion_keeps_a_clearly_better_match_first_despite_boosts() -> None:
    """Importance and recency boosts reorder near-ties but never overturn a clear winner."""
    params = RetrievalParams(fusion="minmax")
    low = LaneHit(row("low"), 1.0)
    strong = LaneHit(row("strong", importance=0.0, age_days=3650), 10.0)
    weak = LaneHit(row("weak", importance=1.0, age_days=0), 5.0)
    assert ids(fuse([strong, weak, low], [], 2, params, NOW)) == ["strong", "weak"]
    tie_old = LaneHit(row("old", importance=0.5, age_days=3650), 5.0)
    tie_new = LaneHit(row("new", importance=1.0, age_days=0), 5.0)
    assert ids(fuse([tie_old, tie_new, low], [], 2, params, NOW)) == ["new", "old"]
    assert boost(row("x", 1.0, 0), params, NOW) <= params.importance_boost + params.recency_boost


def test_fusion_with_one_lane_empty_and_limit() -> None:
    """Either lane alone still ranks by its own score; the limit is honoured."""
    params = RetrievalParams(fusion="minmax")
    semantic = [LaneHit(row(n), s) for n, s in [("x", 0.9), ("y", 0.6), ("z", 0.4)]]
    assert ids(fuse([], semantic, 2, params, NOW)) == ["x", "y"]
    assert fuse([], [], 5, params, NOW) == []


def test_each_lane_spans_its_weight() -> None:
    """Min-max normalisation: a lane's best hit adds its full weight, its worst nothing."""
    params = RetrievalParams(importance_boost=0, recency_boost=0, fusion="minmax")
    semantic = [LaneHit(row("top"), 0.9), LaneHit(row("mid"), 0.6), LaneHit(row("edge"), 0.3)]
    hits = fuse([], semantic, 3, params, NOW)
    assert [round(h.score, 6) for h in hits] == [
        params.semantic_weight,
        params.semantic_weight / 2,
        0.0,
    ]
    exact = [LaneHit(row("e1"), 3.0), LaneHit(row("e2"), 1.0)]
    lexical = [LaneHit(row("l1"), 3.0), LaneHit(row("l2"), 1.0)]
    fused = fuse(lexical, [], 4, params, NOW, exact=exact)
    assert ids(fused)[0] == "l1"  # the stemmed lane outweighs the exact-form lane
    assert {h.row["memory_id"]: round(h.score, 6) for h in fused}["e1"] == params.exact_weight


def test_reciprocal_rank_fusion_uses_ranks_not_score_gaps() -> None:
    """With rrf a lane's rank r adds weight * (k + 1) / (k + r), however far apart the scores."""
    params = RetrievalParams(importance_boost=0, recency_boost=0, fusion="rrf", rrf_k=60)
    semantic = [LaneHit(row("top"), 0.9), LaneHit(row("close"), 0.89), LaneHit(row("far"), 0.1)]
    hits = fuse([], semantic, 3, params, NOW)
    w = params.semantic_weight
    assert [round(h.score, 6) for h in hits] == [
        round(w, 6), round(w * 61 / 62, 6), round(w * 61 / 63, 6)
    ]  # fmt: skip
    # Min-max would put "far" at 0; by rank it is barely behind "close".
    flat = RetrievalParams(importance_boost=0, recency_boost=0, fusion="minmax")
    minmax = fuse([], semantic, 3, flat, NOW)
    assert round(minmax[2].score, 6) == 0.0


async def test_unrelated_query_returns_nothing(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Below the similarity floor nothing is returned; a related query finds the memory."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    memory = (await api.save("Our staging database runs PostgreSQL 17 on port 5433")).memory
    assert memory.has_embedding
    assert await api.search("boiling point of tungsten") == []
    semantic = memory_pb2.SEARCH_MODE_SEMANTIC
    assert await api.search("which port does the test DB listen on?", mode=semantic) == [memory.id]


async def test_a_function_word_alone_matches_nothing(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """In a bucket of one, a query sharing only stop words ("with", "my") with a memory gets
    no lexical hit, now (as_of) or in the past (each lane reads content words only); a
    content word it shares finds it (control)."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"), namespace=unique("ns"))
    memory = (await api.save("Had coffee with Alex")).memory
    assert await api.lexical("wake me up with my recent important memories") == []
    past = common_pb2.TimeTravel(as_of=memory.recorded_at)  # counts rows, not statistics
    assert await api.lexical("wake me up with my recent memories", time=past) == []
    assert [h.memory.id for h in await api.lexical("coffee with friends")] == [memory.id]
    found = await api.lexical("coffee with friends", time=past)
    assert [h.memory.id for h in found] == [memory.id]


async def test_filtered_semantic_search_fills_k_from_a_small_bucket(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Every row nearest the query lies outside the caller's bucket, yet a semantic search
    still returns k rows from it: the HNSW scan keeps walking until the filter is satisfied.

    The seed is small (the property needs the bucket's rows to be farther from the query than
    the whole ef_search candidate list, not a large table), loaded in one statement and
    analysed before the planner is asked anything.
    """
    tenant = unique("t")
    api = Api(channel, brain_server.mint_key(tenant, "alice"), namespace="small")
    # 'big-*' rows sit right on the probe (cosine ~0.99); 'small' rows stand further off
    # (cosine ~0.75, still above the similarity floor), so the nearest few hundred are all big.
    brain_server.sql(
        """INSERT INTO memories (tenant_id, memory_id, version, namespace, content, labels, status,
                                 valid_from, created_by, changed_by, changed_by_key, change,
                                 embedding, embedding_model)
           SELECT t.tenant_id, gen_random_uuid(), 1,
                  CASE WHEN g % 10 = 0 THEN 'small' ELSE 'big-' || (g % 7) END,
                  'synthetic row ' || g, '{team}', 'active', now(), 'seed', 'seed', 'seed', 'save',
                  (SELECT array_agg(CASE WHEN g % 10 = 0 AND i % 2 = 0 THEN 0.1 ELSE 1.0 END
                                    + random() * 0.1 + g * 0)::vector(384)
                   FROM generate_series(1, 384) i),
                  'local'
           FROM tenants t, generate_series(1, $2::int) g WHERE t.name = $1""",
        tenant,
        SEED_ROWS,
    )
    brain_server.sql("ANALYZE memories")
    probe = [1.0] * 384
    norm = math.sqrt(sum(x * x for x in probe))
    response = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(
            scope=api.scope(), query="anything", limit=10, mode=memory_pb2.SEARCH_MODE_SEMANTIC,
            query_embedding=[x / norm for x in probe],
        ),
        metadata=api.md,
    )  # fmt: skip
    assert len(response.hits) == 10
    assert {h.memory.scope.namespace for h in response.hits} == {"small"}

    # The same filtered scan forced onto the HNSW index: with iterative scans it fills k;
    # without them the ef_search candidates (all 'big') leave nothing for the bucket.
    conn = await asyncpg.connect(brain_server.cluster.owner_dsn)
    try:
        tenant_id = await conn.fetchval("SELECT tenant_id FROM tenants WHERE name = $1", tenant)
        query = """SELECT m.memory_id FROM memories m
                   WHERE m.tenant_id = $1 AND m.namespace = 'small' AND m.retired_at IS NULL
                   ORDER BY m.embedding <=> $2::vector(384) LIMIT 10"""

        async def scan(iterative: str) -> tuple[int, str]:
            async with conn.transaction():
                await conn.execute(
                    "SET LOCAL enable_sort = off; SET LOCAL enable_seqscan = off;"
                    " SET LOCAL enable_bitmapscan = off; SET LOCAL hnsw.ef_search = 40"
                )
                await conn.execute("SELECT set_config('hnsw.iterative_scan', $1, true)", iterative)
                plan = await conn.fetch("EXPLAIN " + query, tenant_id, json.dumps(probe))
                hits = await conn.fetch(query, tenant_id, json.dumps(probe))
            return len(hits), "\n".join(r[0] for r in plan)

        found, plan = await scan("relaxed_order")
        assert "memories_embedding_hnsw" in plan
        assert found == 10
        assert (await scan("off"))[0] == 0
    finally:
        await conn.close()


def toy_vector(text: str, dimension: int = 384) -> list[float]:
    """Hashed bag of words: texts sharing words point the same way."""
    vector = [0.0] * dimension
    for word in text.lower().split():
        digest = hashlib.sha256(word.strip(".,?!").encode()).digest()
        vector[int.from_bytes(digest[:4], "big") % dimension] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


class ToyEmbeddings(BaseHTTPRequestHandler):
    """An OpenAI-compatible /v1/embeddings endpoint serving toy_vector."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = [{"index": i, "embedding": toy_vector(t)} for i, t in enumerate(body["input"])]
        payload = json.dumps({"data": data, "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def embedding_port() -> Iterator[int]:
    """A free port where the toy embedding endpoint will be started later."""
    probe = ThreadingHTTPServer(("127.0.0.1", 0), ToyEmbeddings)
    port = probe.server_address[1]
    probe.server_close()
    yield port


async def test_embedder_down_then_backfill(
    pg_cluster: PgCluster, loop_thread: LoopThread, embedding_port: int
) -> None:
    """With the embedder down a save still succeeds (lexical works); backfill then adds vectors."""
    url = f"http://127.0.0.1:{embedding_port}"
    server = BrainServer(
        cluster=pg_cluster, loop=loop_thread,
        settings=server_settings(pg_cluster, embedder="openai", openai_url=url,
                                 openai_model="toy", embedding_dimension=384),
    )  # fmt: skip
    server.start()
    endpoint = None
    try:
        tenant = unique("t")
        async with grpc.aio.insecure_channel(server.target) as channel:
            api = Api(channel, server.mint_key(tenant, "alice"))
            saved = (await api.save("The backup job runs nightly at 02:00")).memory
            assert not saved.has_embedding
            assert await api.search("backup job") == [saved.id]
            semantic = memory_pb2.SEARCH_MODE_SEMANTIC
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await api.search("nightly backup", mode=semantic)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE

            endpoint = ThreadingHTTPServer(("127.0.0.1", embedding_port), ToyEmbeddings)
            threading.Thread(target=endpoint.serve_forever, daemon=True).start()
            status = json.loads(
                server.admin("embeddings", "status", "--tenant", tenant, "--json").stdout
            )
            assert status["pending"] == 1
            done = server.admin(
                "embeddings", "backfill", "--tenant", tenant, "--embedder", "openai",
                "--openai-url", url, "--openai-model", "toy", "--embedding-dimension", "384",
            )  # fmt: skip
            assert "backfilled 1/1" in done.stderr
            assert (await api.get(saved.id)).has_embedding
            assert await api.search("nightly backup", mode=semantic) == [saved.id]
            fresh = (await api.save("Restores are tested monthly")).memory
            assert fresh.has_embedding
    finally:
        server.stop()
        if endpoint is not None:
            endpoint.shutdown()
            endpoint.server_close()


async def test_query_embedding_must_match_the_dimension(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A query vector of the wrong size is INVALID_ARGUMENT naming the field."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    await api.save("dimension check")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.search("dimension", query_embedding=[0.1, 0.2])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "query_embedding" in (err.value.details() or "")
    assert len(await api.search("dimension", query_embedding=[0.05] * 384)) == 1


def test_common_tests_use_real_filter() -> None:
    """The retrieval filter message keeps the fields the lanes rely on."""
    f = common_pb2.MemoryFilter(tags=["x"], namespaces=["a"])
    assert list(f.tags) == ["x"]


async def test_common_terms_are_capped_but_rare_ones_still_rank(
    pg_cluster: PgCluster, loop_thread: LoopThread
) -> None:
    """Past the candidate budget a common term stops pulling rows in, yet rows with the
    query's rare term rank first, and an all-common query still answers from a bounded
    number of its newest rows (4 x candidates)."""
    from dataclasses import replace

    server = BrainServer(
        cluster=pg_cluster, loop=loop_thread, settings=server_settings(pg_cluster, embedder="none")
    )
    server.start()
    try:
        assert server.running is not None
        memories = server.running.memories
        memories.params = replace(memories.params, lexical_df_cap=5, candidates=1)
        async with grpc.aio.insecure_channel(server.target) as channel:
            api = Api(channel, server.mint_key(unique("t"), "alice"))
            for i in range(20):
                await api.save(f"weekly status report number {i}")
            rare = [(await api.save(f"weekly status report about the zeppelin {i}")).memory.id
                    for i in range(2)]  # fmt: skip
            assert sorted(await api.search("status zeppelin", limit=2)) == sorted(rare)
            assert len(await api.search("weekly status", limit=10)) == 4  # bounded candidates
    finally:
        server.stop()
