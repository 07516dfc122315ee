"""brain-bench: search and save throughput as a bucket grows, against the echo ceiling.

``brain-bench --rows 10000 100000 --embedders none local``

First a bare grpc.aio echo server is measured at each concurrency: the most calls per
second a Python gRPC service can answer on this machine (the ceiling). Then, for each
embedder, a private server starts on a fresh embedded database (as brain-eval does), one
tenant's bucket is filled straight through SQL (Zipf-distributed words; each row's vector
the mean of the model's vectors of its words, so only the vocabulary is embedded up front
and the query per search) to each size in turn, and SearchMemories then SaveMemory are
driven over real gRPC from a separate process at each concurrency, for ``--seconds`` or
``--ops`` calls, whichever ends first. Every row says calls/s, p50/p99, the ratio to
the echo ceiling at the same concurrency, and the CPU a call took in the server's
processes, in PostgreSQL's and in the driver's (`cpu`); a last line says what embedding
one query costs, alone and in batches of 16. Words of rank 20 and rarer are written
capitalised, as names (``--names-from``; matching ignores case), so that the kind
``search-two-rounds`` (the same searches with the second retrieval round on) has names to
add; every search row says how many of its searches ran it. Figures depend on the machine
and its load: compare rows within one run. ``python -m brain.server.measure.bench
throughput`` is the older study of what saves wait on in PostgreSQL (see
``bench_throughput``); ``brain-bench ingest`` times how fast a generated repository
becomes searchable (see ``bench_ingest``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import random
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

import asyncpg

from brain.authz import CommandParser, add_version_argument
from brain.server.domain.retrieval.embedders import Embedder
from brain.server.measure.cpu import Watched
from brain.server.measure.load import drive, start_echo_server
from brain.server.measure.private import private_brain, worker_server
from brain.server.measure.synthetic import (
    EMBEDDED_WORDS,
    fill,
    sentence,
    tenant_of,
    vocabulary,
)
from brain.server.runtime.cpus import usable_cpus
from brain.server.telemetry import logs, metrics

# search: hybrid with an embedder, else lexical; semantic: the query's vector alone (the
# workload of a vector-only memory service); get: one memory by id, the floor of any call
# that reads the database through the whole stack (authorization, transaction, one row).
# search-two-rounds: the same searches with the second retrieval round (two hops, off by
# default) on, by names and by vector, on the same data (the in-process server only:
# --workers 1).
# save-under-quota: the same saves in a tenant with a memory quota set (far above its rows),
# so each also counts the tenant and the caller's visible rows (server/domain/quotas.py).
KINDS = ("search", "search-two-rounds", "semantic", "save", "save-under-quota", "get")
QUOTA_MEMORIES = 2**40
SECOND_ROUND_NAMES, SECOND_ROUND_VECTOR = 3, 1.0
DEFAULT_KINDS = ("search", "save")
# Words of this rank and rarer are stored capitalised (names): about half the rows hold
# one, so most searches' best hits name something the query does not (a second round).
NAMES_FROM = 20


async def run(
    sizes: Sequence[int],
    concurrencies: Sequence[int],
    embedders: Sequence[str],
    ops: int,
    seconds: float,
    seed: int,
    kinds: Sequence[str] = DEFAULT_KINDS,
    workers: int = 1,
    names_from: int = NAMES_FROM,
    database: tuple[str, str] | None = None,
    embedded_words: int = EMBEDDED_WORDS,
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    spawn = multiprocessing.get_context("spawn")
    results: dict[str, Any] = {"echo": {}, "runs": [], "embedding": {}}
    # Every row sends texts of its own: the server caches query vectors, so a row that
    # replayed an earlier row's queries (search then semantic, or the next size on the
    # same server) would measure the cache instead of embedding its queries.
    streams = itertools.count(seed * 10_000)
    with ProcessPoolExecutor(1, mp_context=spawn) as pool:

        async def load(
            address: str, key: str, kind: str, c: int, watched: dict[str, Watched]
        ) -> dict[str, Any]:
            print(f"  {kind} at concurrency {c}…", file=sys.stderr)
            sent = {"search-two-rounds": "search", "save-under-quota": "save"}.get(kind, kind)
            rounds = second_rounds(), second_rounds("hop_vector")
            measured: dict[str, Any] = await loop.run_in_executor(
                pool, drive, address, key, sent, c, ops, next(streams), seconds, watched
            )
            if sent == "search" and workers == 1:  # the in-process server's own count
                calls = (measured["ok"] + sum(measured["errors"].values())) or 1
                measured["second_round_share"] = round((second_rounds() - rounds[0]) / calls, 3)
                measured["vector_round_share"] = round(
                    (second_rounds("hop_vector") - rounds[1]) / calls, 3
                )
            return measured

        print("echo ceiling…", file=sys.stderr)
        server, address = await start_echo_server()
        try:
            for c in concurrencies:
                echo_server = {"server": Watched(os.getpid(), tree=False)}
                results["echo"][c] = await load(address, "", "echo", c, echo_server)
        finally:
            await server.stop(None)
        for embedder in embedders:
            async with (
                private_brain(embedder, database=database) as brain,
                worker_server(brain, embedder, workers) as (address, serving),
            ):
                watched = {"server": serving}
                if brain.database_pid is not None:
                    watched["postgres"] = Watched(brain.database_pid)
                bucket = await brain.bucket("bench")
                tenant = await tenant_of(brain, bucket.api_key)
                model_of = brain.memories.embedder
                words = (
                    await model_of.embed(vocabulary(embedded_words)) if model_of.dimension else []
                )
                if model_of.dimension:
                    results["embedding"][embedder] = await embedding_cost(model_of, seed)
                for size in sorted(sizes):
                    print(f"{embedder}: filling to {size} memories…", file=sys.stderr)
                    dimension = 0 if embedder == "none" else brain.memories.embedding_dimension
                    model = brain.memories.embedding_model or ""
                    cost = await fill(
                        brain.owner_dsn, tenant, size, dimension, seed, model, words, names_from
                    )
                    shipped = brain.memories.params
                    for kind in kinds:
                        if kind == "semantic" and embedder == "none":
                            continue
                        if kind == "search-two-rounds":
                            if workers > 1:
                                print("  search-two-rounds needs --workers 1", file=sys.stderr)
                                continue
                            brain.memories.params = replace(
                                shipped,
                                hop_entities=SECOND_ROUND_NAMES,
                                hop_vector_weight=SECOND_ROUND_VECTOR,
                            )
                        quota = QUOTA_MEMORIES if kind == "save-under-quota" else None
                        await memory_quota(brain.owner_dsn, tenant, quota)
                        for c in concurrencies:
                            measured = await load(address, bucket.api_key, kind, c, watched)
                            echo = results["echo"][c]["per_s"] or 1.0
                            measured["vs_echo"] = round(measured["per_s"] / echo, 3)
                            print(f"    {json.dumps(measured)}", file=sys.stderr)
                            results["runs"].append(
                                {"embedder": embedder, "rows": size, "kind": kind,
                                 "concurrency": c, "workers": workers, **measured, **cost}
                            )  # fmt: skip
                        brain.memories.params = shipped
    return results


async def memory_quota(owner_dsn: str, tenant: str, limit: int | None) -> None:
    """Set (or, with None, lift) the bench tenant's memory quota."""
    conn = await asyncpg.connect(owner_dsn)
    try:
        await conn.execute(
            """INSERT INTO tenant_quotas (tenant_id, max_memories)
               SELECT tenant_id, $2 FROM tenants WHERE name = $1
               ON CONFLICT (tenant_id) DO UPDATE SET max_memories = EXCLUDED.max_memories""",
            tenant,
            limit,
        )
    finally:
        await conn.close()


async def embedding_cost(embedder: Embedder, seed: int) -> dict[str, float]:
    """CPU ms per query (six Zipf words, as the driver sends) the embedder takes in this
    process: one query at a time, and in batches of 16 (as the server batches concurrent
    queries)."""
    rng = random.Random(seed)
    cost: dict[str, float] = {}
    for batch, queries in (("alone", 24), ("batch_16", 160)):
        texts = [sentence(rng, 6) for _ in range(queries)]
        size = 1 if batch == "alone" else 16
        started = time.process_time()
        for i in range(0, queries, size):
            await embedder.embed(texts[i : i + size])
        cost[f"cpu_ms_{batch}"] = round((time.process_time() - started) * 1000 / queries, 2)
    return cost


def second_rounds(lane: str = "hop") -> float:
    """How many second retrieval rounds (``hop``: by names; ``hop_vector``: by the moved
    vector) this process's server has run."""
    count = metrics.REGISTRY.get_sample_value(
        "brain_retrieval_lane_duration_seconds_count", {"lane": lane}
    )
    return count or 0.0


def _cpu(row: dict[str, Any]) -> str:
    """server/postgres/driver CPU ms per call, as the table shows them."""
    cpu = row.get("cpu_ms") or {}
    return "/".join(f"{cpu[name]:.1f}" if name in cpu else "-"
                    for name in ("server", "postgres", "driver"))  # fmt: skip


def report(results: dict[str, Any]) -> str:
    lines = [
        f"{'':>8} {'rows':>9} {'kind':>8} {'conc':>4} {'calls/s':>8} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'vs echo':>8} {'errors':>6}  CPU ms/call server/postgres/driver"
    ]
    for c, e in results["echo"].items():
        lines.append(
            f"{'echo':>8} {'':>9} {'echo':>8} {c:>4} {e['per_s']:>8} {e['p50_ms']:>8} "
            f"{e['p99_ms']:>8} {1.0:>8} {sum(e['errors'].values()):>6}  {_cpu(e)}"
        )
    for r in results["runs"]:
        lines.append(
            f"{r['embedder']:>8} {r['rows']:>9} {r['kind']:>8} {r['concurrency']:>4} "
            f"{r['per_s']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['vs_echo']:>8} "
            f"{sum(r['errors'].values()):>6}  {_cpu(r)}"
            + (f"  second round by names in {r['second_round_share']:.0%}, by vector in "
               f"{r['vector_round_share']:.0%}" if "second_round_share" in r else "")
        )  # fmt: skip
    fills = {(r["embedder"], r["rows"]): r for r in results["runs"]}
    for (embedder, rows), r in fills.items():
        hnsw = (
            f", HNSW build {r['hnsw_build_s']} s ({r['hnsw_mb']} MB, maintenance_work_mem "
            f"{r['build_memory_mb']} MB)"
            if "hnsw_mb" in r
            else ""
        )
        lines.append(
            f"fill {embedder} to {rows}: {r['fill_s']} s, term statistics {r['stats_s']} s{hnsw}"
        )
    for embedder, cost in results.get("embedding", {}).items():
        lines.append(
            f"query embedding ({embedder}): {cost['cpu_ms_alone']} ms CPU per query alone, "
            f"{cost['cpu_ms_batch_16']} in batches of 16"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["throughput"]:
        from brain.server.measure import bench_throughput

        bench_throughput.main(argv[1:])
        return
    if argv[:1] == ["ingest"]:
        from brain.server.measure import bench_ingest

        bench_ingest.main(argv[1:])
        return
    parser = CommandParser(
        prog="brain-bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="other measurements (each with its own --help):\n"
        "  ingest      how fast a generated repository becomes searchable (bench_ingest)\n"
        "  throughput  what saves wait on in PostgreSQL (bench_throughput)",
    )
    add_version_argument(parser)
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument(
        "--embedders", nargs="+", choices=["none", "local"], default=["none", "local"]
    )
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(DEFAULT_KINDS))
    parser.add_argument("--ops", type=int, default=2000, help="at most this many calls per row")
    parser.add_argument("--seconds", type=float, default=10.0, help="at most this long per row")
    parser.add_argument(
        "--workers", type=int, default=usable_cpus(),
        help="server processes (brain-server --workers); 1: the private in-process server",
    )  # fmt: skip
    parser.add_argument(
        "--names-from", type=int, default=NAMES_FROM,
        help="words of this frequency rank and rarer are stored capitalised, as names the "
        "second retrieval round can add (0: none)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--embedded-words", type=int, default=EMBEDDED_WORDS,
        help="how many of the most frequent words the model embeds for the fill (a row's "
        "vector is the mean of its words' among them; the default covers 99.98%% of words "
        "drawn)",
    )  # fmt: skip
    parser.add_argument(
        "--database-url", metavar="OWNER_URL",
        help="a migrated database (as its owner) instead of a fresh embedded one, e.g. a "
        "Citus coordinator (deploy/SCALING.md); a bench tenant is added to it",
    )  # fmt: skip
    parser.add_argument(
        "--app-database-url",
        metavar="APP_URL",
        help="the server's login role on that database (with --database-url)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if min(args.rows) < 1 or args.workers < 1 or min(args.concurrency) < 1:
        parser.error("--rows and --concurrency need positive numbers")
    if args.embedded_words < 1:
        parser.error("--embedded-words needs a positive number")
    if bool(args.database_url) != bool(args.app_database_url):
        parser.error("--database-url and --app-database-url go together")
    logs.configure("warning")
    results = asyncio.run(
        run(args.rows, args.concurrency, args.embedders, args.ops, args.seconds, args.seed,
            args.kinds, args.workers, args.names_from,
            (args.database_url, args.app_database_url) if args.database_url else None,
            args.embedded_words)
    )  # fmt: skip
    print(json.dumps(results) if args.json else report(results))


if __name__ == "__main__":
    main()
