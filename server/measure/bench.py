"""Search latency as a bucket grows.

``python -m brain.server.measure.bench --rows 1000 10000 50000``.

``python -m brain.server.measure.bench throughput`` measures saves/s and searches/s at several
concurrencies instead (see ``bench_throughput``).

Starts a private server on a fresh embedded database (as brain-eval does), fills one
tenant's bucket with synthetic memories straight through SQL (a Zipf-distributed
vocabulary, so some words are common and most are rare), then times SearchMemories over
gRPC for random queries and prints p50/p95 per size. Lexical only unless ``--embedder``
is given; with an embedder the synthetic rows get random unit vectors of the right size.
Figures depend on the machine: compare sizes within one run, not across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Sequence

import grpc

from brain.server.measure.evaluation import PrivateBrain, percentile, private_brain
from brain.server.measure.synthetic import fill, sentence, tenant_of
from brain.v1 import common_pb2, memory_pb2, memory_pb2_grpc


async def time_searches(
    brain: PrivateBrain, api_key: str, queries: Sequence[str], limit: int
) -> list[float]:
    md = (("authorization", f"Bearer {api_key}"),)
    scope = common_pb2.Scope(namespace="bench")
    out = []
    async with grpc.aio.insecure_channel(brain.address) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        for q in queries:
            started = time.perf_counter()
            await stub.SearchMemories(
                memory_pb2.SearchMemoriesRequest(scope=scope, query=q, limit=limit),
                metadata=md,
                timeout=30,
            )
            out.append((time.perf_counter() - started) * 1000)
    return out


async def run(
    sizes: Sequence[int], queries: int, embedder: str, seed: int
) -> list[dict[str, float]]:
    rng = random.Random(seed)
    results = []
    async with private_brain(embedder) as brain:
        bucket = await brain.bucket("bench")
        tenant = await tenant_of(brain, bucket.api_key)
        dimension = 0 if embedder == "none" else 384
        filled = 0
        for size in sorted(sizes):
            print(f"filling to {size} memories…", file=sys.stderr)
            await fill(brain.owner_dsn, tenant, size - filled, dimension, rng)
            filled = size
            asked = [sentence(rng, 6) for _ in range(queries)]
            await time_searches(brain, bucket.api_key, asked[:5], 10)  # warm caches
            ms = await time_searches(brain, bucket.api_key, asked, 10)
            results.append(
                {"rows": size, "search_p50_ms": round(percentile(ms, 50), 1),
                 "search_p95_ms": round(percentile(ms, 95), 1)}
            )  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["throughput"]:
        from brain.server.measure import bench_throughput

        bench_throughput.main(argv[1:])
        return
    parser = argparse.ArgumentParser(
        prog="python -m brain.server.measure.bench", description=__doc__
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 10000, 50000])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--embedder", default="none", choices=["none", "local"])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = asyncio.run(run(args.rows, args.queries, args.embedder, args.seed))
    if args.json:
        print(json.dumps(results))
        return
    print(f"{'memories in bucket':>20} {'search p50':>12} {'search p95':>12}")
    for r in results:
        print(f"{r['rows']:>20} {r['search_p50_ms']:>10} ms {r['search_p95_ms']:>10} ms")


if __name__ == "__main__":
    main()
