"""What the benchmarks share: synthetic memories filled through SQL, and a load driver.

The driver runs in a child process (``drive``), so the callers do not share the server's
event loop or its core; it sends saves, searches or bare echoes from ``concurrency``
callers until ``ops`` calls are done or ``seconds`` have passed, and reports calls per
second with p50/p95/p99 latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
import uuid
from collections import Counter
from typing import Any

import asyncpg
import grpc

from brain.v1 import common_pb2, memory_pb2, memory_pb2_grpc

from .evaluation import PrivateBrain, percentile

VOCABULARY = 20_000
NAMESPACE = "bench"
ECHO_METHOD = "/brain.bench.Echo/Echo"


def sentence(rng: random.Random, words: int) -> str:
    """Words drawn with Zipf-like frequencies: w17 is common, w19870 rare."""
    return " ".join(f"w{int(rng.paretovariate(1.1)) % VOCABULARY}" for _ in range(words))


# One statement: the same Zipf vocabulary as `sentence`, 8 to 30 words per memory, and a
# random vector per row when the bucket has an embedder (only the query is embedded).
FILL_SQL = """
    INSERT INTO memories (tenant_id, memory_id, version, namespace, content, labels, status,
                          valid_from, created_by, changed_by, changed_by_key, change,
                          embedding, embedding_model)
    SELECT $1, gen_random_uuid(), 1, $5,
           (SELECT string_agg('w' || (floor(power(1 - random(), -1 / 1.1))::bigint
                                      % $4::int), ' ')
            FROM generate_series(1, 8 + (g * 7919 + $6::int) % 23)),
           '{team}', 'active', now(), 'bench', 'bench', 'bench', 'save',
           CASE WHEN $3::int > 0 THEN
               (SELECT array_agg(random() - 0.5)::vector FROM generate_series(1, $3::int + g * 0))
           END,
           CASE WHEN $3::int > 0 THEN 'bench' END
    FROM generate_series(1, $2::int) g"""


async def fill(
    owner_dsn: str, tenant: str, target: int, dimension: int, seed: int = 7
) -> dict[str, float]:
    """Fill the tenant's bucket ``bench`` up to ``target`` current memories, in one statement.

    With vectors, the HNSW index is dropped first and built again afterwards, so the fill
    measures what building it costs (``hnsw_build_s``) instead of slow row-by-row inserts.
    """
    conn = await asyncpg.connect(owner_dsn)
    out: dict[str, float] = {}
    try:
        tenant_id = await conn.fetchval("SELECT tenant_id FROM tenants WHERE name = $1", tenant)
        rows = target - await conn.fetchval(
            "SELECT count(*) FROM memories WHERE tenant_id = $1 AND namespace = $2"
            " AND retired_at IS NULL",
            tenant_id,
            NAMESPACE,
        )
        await conn.execute("SELECT setseed($1)", (seed % 1000) / 1000)
        hnsw = None
        if dimension:
            hnsw = await conn.fetchval(
                "SELECT pg_get_indexdef('memories_embedding_hnsw'::regclass)"
            )
            await conn.execute("DROP INDEX memories_embedding_hnsw")
        started = time.perf_counter()
        # Term statistics are counted once for the whole load, not row by row.
        await conn.execute("ALTER TABLE memories DISABLE TRIGGER memories_lexical_stats")
        try:
            await conn.execute(FILL_SQL, tenant_id, rows, dimension, VOCABULARY, NAMESPACE, seed)
        finally:
            await conn.execute("ALTER TABLE memories ENABLE TRIGGER memories_lexical_stats")
        out["fill_s"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        await conn.execute("SELECT brain_rebuild_lexical_stats($1)", tenant_id)
        out["stats_s"] = round(time.perf_counter() - started, 1)
        out["inserted"] = max(rows, 0)
        if hnsw is not None:
            started = time.perf_counter()
            await conn.execute("SET maintenance_work_mem = '512MB'")
            await conn.execute(hnsw)
            out["hnsw_build_s"] = round(time.perf_counter() - started, 1)
            out["hnsw_mb"] = round(
                await conn.fetchval(
                    "SELECT pg_relation_size('memories_embedding_hnsw') / 1048576.0"
                ),
                1,
            )
        await conn.execute("ANALYZE memories")
    finally:
        await conn.close()
    return out


async def tenant_of(brain: PrivateBrain, api_key: str) -> str:
    """The tenant name of a key minted by ``brain.bucket``."""
    conn = await asyncpg.connect(brain.owner_dsn)
    try:
        name: str = await conn.fetchval(
            "SELECT t.name FROM api_keys k JOIN tenants t USING (tenant_id) WHERE k.key_id = $1",
            api_key.split("_")[1],
        )
        return name
    finally:
        await conn.close()


# --- the bare echo server: the ceiling a grpc.aio service can reach on this machine -----


async def _echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return request


async def start_echo_server() -> tuple[grpc.aio.Server, str]:
    """A grpc.aio server whose one method answers with its request's bytes."""
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "brain.bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(_echo)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


# --- the load driver (runs in a child process) -------------------------------------------


def drive(
    address: str,
    api_key: str,
    kind: str,
    concurrency: int,
    ops: int,
    seed: int,
    seconds: float = 0.0,
) -> dict[str, Any]:
    """Run up to ``ops`` calls of ``kind`` (save, search, echo) with ``concurrency`` callers,
    stopping early after ``seconds`` when given."""
    return asyncio.run(_drive(address, api_key, kind, concurrency, ops, seed, seconds))


async def _drive(
    address: str,
    api_key: str,
    kind: str,
    concurrency: int,
    ops: int,
    seed: int,
    seconds: float,
) -> dict[str, Any]:
    rng = random.Random(seed)
    if kind == "save":
        texts = [f"{sentence(rng, rng.randint(8, 30))} s{seed}n{i}" for i in range(ops)]
    else:
        texts = [sentence(rng, 6) for _ in range(ops)]
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    todo = iter(texts)
    scope = common_pb2.Scope(namespace=NAMESPACE)
    md = (("authorization", f"Bearer {api_key}"),)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        echo = channel.unary_unary(ECHO_METHOD, None, None)
        deadline = float("inf")

        async def call(text: str) -> None:
            if kind == "echo":
                request = memory_pb2.SearchMemoriesRequest(scope=scope, query=text, limit=10)
                await echo(request.SerializeToString(), timeout=60)
            elif kind == "save":
                await stub.SaveMemory(
                    memory_pb2.SaveMemoryRequest(
                        scope=scope,
                        memory=common_pb2.MemoryDraft(content=text),
                        idempotency_key=f"bench-{uuid.uuid4()}",
                    ),
                    metadata=md, timeout=60,
                )  # fmt: skip
            else:
                await stub.SearchMemories(
                    memory_pb2.SearchMemoriesRequest(scope=scope, query=text, limit=10),
                    metadata=md, timeout=60,
                )  # fmt: skip

        async def caller() -> None:
            for text in todo:  # one shared iterator: each text is sent once
                if time.perf_counter() > deadline:
                    return
                started = time.perf_counter()
                try:
                    await call(text)
                except grpc.aio.AioRpcError as exc:
                    errors[exc.code().name] += 1
                    continue
                latencies.append((time.perf_counter() - started) * 1000)

        for text in itertools.islice(todo, 3):  # warm up: connection, caches
            with contextlib.suppress(grpc.aio.AioRpcError):
                await call(text)
        started = time.perf_counter()
        deadline = started + seconds if seconds else float("inf")
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {
        "ok": len(latencies),
        "per_s": round(len(latencies) / elapsed, 1) if elapsed else 0.0,
        "p50_ms": round(percentile(latencies, 50), 1) if latencies else None,
        "p95_ms": round(percentile(latencies, 95), 1) if latencies else None,
        "p99_ms": round(percentile(latencies, 99), 1) if latencies else None,
        "errors": dict(errors),
    }
