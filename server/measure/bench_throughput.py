"""What saves wait on in PostgreSQL: ``python -m brain.server.measure.bench throughput``.

Starts a private server on a fresh embedded database (as brain-eval does), then, for each
concurrency, drives SaveMemory and then SearchMemories over real gRPC from a separate
process (each save with a fresh idempotency key, as the Python clients send) and prints
operations per second with p50/p95 latency. While it runs it samples
``pg_stat_activity`` and reports what the busy backends were waiting for; a lock wait
during COMMIT is the tenant's audit-chain head, taken by the deferred audit trigger.
Figures depend on the machine and its load: compare rows within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import asyncpg

from brain.server.measure.load import drive
from brain.server.measure.private import private_brain
from brain.server.measure.synthetic import fill, tenant_of
from brain.server.telemetry import logs

# What each busy backend is doing at one instant; COMMIT is where the audit trigger runs.
SAMPLE_SQL = """
    SELECT COALESCE(wait_event_type, 'CPU') AS wait_type, COALESCE(wait_event, '') AS wait,
           query ILIKE 'commit%' AS at_commit
    FROM pg_stat_activity
    WHERE datname = current_database() AND backend_type = 'client backend'
      AND state = 'active' AND pid <> pg_backend_pid()"""


async def sample_waits(owner_dsn: str, stop: asyncio.Event) -> dict[str, Any]:
    """Sample busy backends every 20 ms until ``stop``; shares of backend-samples by wait."""
    conn = await asyncpg.connect(owner_dsn)
    seen: Counter[str] = Counter()
    samples = 0
    try:
        while not stop.is_set():
            for r in await conn.fetch(SAMPLE_SQL):
                where = "commit" if r["at_commit"] else "statement"
                seen[f"{r['wait_type']}:{r['wait']}@{where}".replace(":@", "@")] += 1
            samples += 1
            await asyncio.sleep(0.02)
    finally:
        await conn.close()
    busy = sum(seen.values())
    return {
        "busy_backends": round(busy / max(samples, 1), 1),
        "lock_at_commit": round(
            sum(n for k, n in seen.items() if k.startswith("Lock:") and k.endswith("@commit"))
            / max(busy, 1),
            3,
        ),
        "waits": {k: round(n / max(busy, 1), 3) for k, n in seen.most_common(6)},
    }


async def without_audit_chain(owner_dsn: str) -> None:
    """Switch memory writes' audit events off in the throwaway database, to measure the cost."""
    conn = await asyncpg.connect(owner_dsn)
    try:
        await conn.execute("ALTER TABLE memories DISABLE TRIGGER memories_audit_flush")
    finally:
        await conn.close()


async def run(
    concurrencies: Sequence[int],
    ops: int,
    rows: int,
    seed: int,
    kinds: Sequence[str] = ("save", "search"),
    audit_chain: bool = True,
) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    spawn = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    async with private_brain("none") as brain:
        bucket = await brain.bucket("bench")
        tenant = await tenant_of(brain, bucket.api_key)
        if not audit_chain:
            await without_audit_chain(brain.owner_dsn)
        print(f"filling {rows} memories to search…", file=sys.stderr)
        await fill(brain.owner_dsn, tenant, rows, 0, seed)
        with ProcessPoolExecutor(1, mp_context=spawn) as pool:
            for i, concurrency in enumerate(concurrencies):
                row: dict[str, Any] = {"concurrency": concurrency}
                for kind in kinds:
                    print(f"{ops} x {kind} at concurrency {concurrency}…", file=sys.stderr)
                    stop = asyncio.Event()
                    sampler = asyncio.create_task(sample_waits(brain.owner_dsn, stop))
                    try:
                        measured = await loop.run_in_executor(
                            pool, drive, brain.address, bucket.api_key, kind, concurrency, ops,
                            seed + i,
                        )  # fmt: skip
                    finally:
                        stop.set()
                        waits = await sampler
                    row[kind] = {**measured, "db": waits}
                results.append(row)
    return results


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        f"{'concurrency':>11} {'kind':>6} {'ops/s':>8} {'p50':>9} {'p95':>9} {'errors':>6}  "
        "busy backends; what they waited for"
    ]
    for r in results:
        for kind in ("save", "search"):
            if kind not in r:
                continue
            k, db = r[kind], r[kind]["db"]
            waits = ", ".join(f"{w} {share:.0%}" for w, share in db["waits"].items())
            lines.append(
                f"{r['concurrency']:>11} {kind:>6} {k['per_s']:>8} {k['p50_ms']:>7}ms "
                f"{k['p95_ms']:>7}ms {sum(k['errors'].values()):>6}  "
                f"{db['busy_backends']}; {waits}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m brain.server.measure.bench throughput", description=__doc__
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--ops", type=int, default=2000, help="saves, then searches, per level")
    parser.add_argument("--rows", type=int, default=5000, help="memories to search among")
    parser.add_argument(
        "--kinds", nargs="+", choices=["save", "search"], default=["save", "search"]
    )
    parser.add_argument(
        "--no-audit-chain",
        action="store_true",
        help="measure without the audit trigger (in the throwaway database) to see its cost",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    logs.configure("warning")
    results = asyncio.run(
        run(args.concurrency, args.ops, args.rows, args.seed, args.kinds, not args.no_audit_chain)
    )
    print(json.dumps(results) if args.json else report(results))
