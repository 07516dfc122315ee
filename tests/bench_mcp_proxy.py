"""Benchmark, not a test: p50 of remember/recall through brain-mcp vs the gRPC client directly.

    .venv/bin/python -m pytest -q -s -p no:cacheprovider tests/bench_mcp_proxy.py

The proxy's overhead is the difference between the two columns (stdio + JSON + rendering).
"""

from __future__ import annotations

import os
import statistics
import time

from brain.clients import AsyncBrainClient, Scope

from .conftest import BrainServer, unique
from .test_mcp_proxy import brain_env, call, mcp_session, text_of

ROUNDS = int(os.environ.get("BENCH_ROUNDS") or 40)


def p50(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.1f} ms"


async def test_bench_proxy_overhead(brain_server: BrainServer) -> None:
    """Prints remember/recall p50 through brain-mcp and through AsyncBrainClient."""
    ns = unique("ns")
    key = brain_server.mint_key(unique("t"), "agent:bench", user="u", namespaces=(ns,))
    timings: dict[str, list[float]] = {"remember": [], "recall": [], "save": [], "search": []}
    async with mcp_session(brain_env(brain_server.target, key, "u", ns)) as session:
        for i in range(ROUNDS):
            start = time.perf_counter()
            saved = await call(session, "remember", content=f"bench fact number {i} about proxies")
            timings["remember"].append(time.perf_counter() - start)
            assert not saved.is_error, text_of(saved)
            start = time.perf_counter()
            await call(session, "recall", query=f"fact number {i}")
            timings["recall"].append(time.perf_counter() - start)
    async with AsyncBrainClient(
        brain_server.target, key, scope=Scope(user_id="u", namespace=ns)
    ) as client:
        for i in range(ROUNDS):
            start = time.perf_counter()
            await client.save(f"direct fact number {i} about clients")
            timings["save"].append(time.perf_counter() - start)
            start = time.perf_counter()
            await client.search(f"fact number {i}")
            timings["search"].append(time.perf_counter() - start)
    print(
        f"\nthrough brain-mcp: remember p50 {p50(timings['remember'])}, "
        f"recall p50 {p50(timings['recall'])}\n"
        f"direct client:     save p50 {p50(timings['save'])}, "
        f"search p50 {p50(timings['search'])}"
    )


async def test_bench_downed_server() -> None:
    """Prints how long a tool call takes to fail through brain-mcp when nothing listens."""
    from .test_mcp_proxy import free_port

    env = brain_env(f"127.0.0.1:{free_port()}", "brk_" + "x" * 60, namespace="n")
    samples: list[float] = []
    async with mcp_session(env) as session:
        for _ in range(ROUNDS):
            start = time.perf_counter()
            failed = await call(session, "recall", query="anything")
            samples.append(time.perf_counter() - start)
            assert failed.is_error
    print(f"\nserver down: recall fails in p50 {p50(samples)}, max {max(samples) * 1000:.1f} ms")
