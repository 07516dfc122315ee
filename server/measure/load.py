"""The benchmarks' load: a bare echo server, and a driver that runs in a child process.

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
from collections.abc import Mapping
from typing import Any

import grpc

from brain.server.measure.cpu import CpuMeter, Watched
from brain.server.measure.stats import percentile
from brain.server.measure.synthetic import NAMESPACE, sentence
from brain.v1 import common_pb2, memory_pb2, memory_pb2_grpc

ECHO_METHOD = "/brain.bench.Echo/Echo"
# Callers share up to this many connections (each its own TCP connection), as a team's
# many clients would: with one connection every call would reach the same server worker.
CONNECTIONS = 8


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
    watched: Mapping[str, Watched] | None = None,
) -> dict[str, Any]:
    """Run up to ``ops`` calls of ``kind`` (save, search, semantic, get, echo) with
    ``concurrency`` callers, stopping early after ``seconds`` when given. The CPU the
    ``watched`` processes and the driver itself used meanwhile is reported per call."""
    return asyncio.run(
        _drive(address, api_key, kind, concurrency, ops, seed, seconds, watched or {})
    )


async def _drive(
    address: str,
    api_key: str,
    kind: str,
    concurrency: int,
    ops: int,
    seed: int,
    seconds: float,
    watched: Mapping[str, Watched],
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
    async with contextlib.AsyncExitStack() as stack:
        channels = [
            await stack.enter_async_context(
                grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
            )
            for _ in range(min(concurrency, CONNECTIONS))
        ]
        deadline = float("inf")
        known = ""  # the memory `get` reads
        if kind == "get":
            saved = await memory_pb2_grpc.MemoryServiceStub(channels[0]).SaveMemory(
                memory_pb2.SaveMemoryRequest(
                    scope=scope, memory=common_pb2.MemoryDraft(content=f"get {seed}")
                ),
                metadata=md, timeout=60,
            )  # fmt: skip
            known = saved.memory.id

        async def call(text: str, caller_index: int = 0) -> None:
            channel = channels[caller_index % len(channels)]
            stub = memory_pb2_grpc.MemoryServiceStub(channel)
            echo = channel.unary_unary(ECHO_METHOD, None, None)
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
            elif kind == "get":
                await stub.GetMemory(
                    memory_pb2.GetMemoryRequest(scope=scope, id=known), metadata=md, timeout=60
                )
            else:
                mode = (
                    memory_pb2.SEARCH_MODE_SEMANTIC
                    if kind == "semantic"
                    else memory_pb2.SEARCH_MODE_UNSPECIFIED
                )
                await stub.SearchMemories(
                    memory_pb2.SearchMemoriesRequest(scope=scope, query=text, limit=10, mode=mode),
                    metadata=md, timeout=60,
                )  # fmt: skip

        async def caller(index: int) -> None:
            for text in todo:  # one shared iterator: each text is sent once
                if time.perf_counter() > deadline:
                    return
                started = time.perf_counter()
                try:
                    await call(text, index)
                except grpc.aio.AioRpcError as exc:
                    errors[exc.code().name] += 1
                    continue
                latencies.append((time.perf_counter() - started) * 1000)

        for index, text in enumerate(itertools.islice(todo, max(3, len(channels)))):  # warm up
            with contextlib.suppress(grpc.aio.AioRpcError):
                await call(text, index)  # each connection, and the server's caches
        meter = CpuMeter(watched)
        meter.start()
        driver_cpu = time.process_time()
        started = time.perf_counter()
        deadline = started + seconds if seconds else float("inf")
        await asyncio.gather(*(caller(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - started
        driver_cpu = time.process_time() - driver_cpu  # before the meter reads /proc
        used = meter.stop()
        if used:
            used["driver"] = driver_cpu
    calls = len(latencies) + sum(errors.values())
    return {
        "ok": len(latencies),
        "per_s": round(len(latencies) / elapsed, 1) if elapsed else 0.0,
        "p50_ms": round(percentile(latencies, 50), 1) if latencies else None,
        "p95_ms": round(percentile(latencies, 95), 1) if latencies else None,
        "p99_ms": round(percentile(latencies, 99), 1) if latencies else None,
        "errors": dict(errors),
        # CPU milliseconds per call, by process group (see `cpu`).
        "cpu_ms": {name: round(s * 1000 / calls, 2) for name, s in used.items()} if calls else {},
    }
