"""Prometheus metrics, served on their own optional address (``--metrics-listen``).

With ``--workers`` above 1 the parent process serves one endpoint for the whole server:
each worker writes its values to files in ``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's
multiprocess mode, chosen when that variable is set as the worker starts) and the parent
adds them up at every scrape. Counters and histograms sum over every worker that ever
ran; gauges say how they combine (``multiprocess_mode``); live connection-pool figures,
read from the pools at scrape time in one process, are published by each worker as it
uses its pool.

Labels are bounded and hold no tenant content: gRPC method names (only the methods in
the permission table reach the recorder), status code names, retrieval lane names, pool
names and — for rate-limit refusals only — the public key id (never a secret). Memory
text, queries and SQL values never become labels.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    multiprocess,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from brain.server.telemetry import tracing

# Set by the parent of several workers before it starts them (see the module docstring).
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
MULTIPROCESS = bool(os.environ.get(MULTIPROCESS_ENV))

REGISTRY = CollectorRegistry(auto_describe=True)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

RPC_REQUESTS = Counter(
    "brain_rpc_requests",
    "Finished brain.v1 calls, by method and gRPC status code.",
    ["method", "code"],
    registry=REGISTRY,
)
RPC_DURATION = Histogram(
    "brain_rpc_duration_seconds",
    "brain.v1 call latency, by method and gRPC status code.",
    ["method", "code"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
RATE_LIMITED = Counter(
    "brain_rate_limited",
    "Calls refused by the per-key rate limit, by public key id.",
    ["key_id"],
    registry=REGISTRY,
)
LANE_DURATION = Histogram(
    "brain_retrieval_lane_duration_seconds",
    "Time one retrieval lane's query took, by lane (lexical: both BM25 lanes in one "
    "statement; exact: the exact-form lane alone, for searches of the past or of "
    "candidates; semantic).",
    ["lane"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
EMBED_DURATION = Histogram(
    "brain_embedder_duration_seconds",
    "Embedder call latency, by embedder.",
    ["embedder"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
EMBED_BATCH = Histogram(
    "brain_embedder_batch_size",
    "Texts per embedder call, by embedder.",
    ["embedder"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    registry=REGISTRY,
)
EMBED_FAILURES = Counter(
    "brain_embedder_failures",
    "Embedder calls that failed, by embedder.",
    ["embedder"],
    registry=REGISTRY,
)
CHUNK_EMBEDDINGS = Counter(
    "brain_chunk_embeddings",
    "Knowledge chunks the background filler handled, by outcome: stored (a vector landed), "
    "discarded (retired or erased while embedding: no vector) or failed (to be retried).",
    ["outcome"],
    registry=REGISTRY,
)
POOL_WAITING = Gauge(
    "brain_db_pool_waiting",
    "Transactions waiting for a pool connection, by pool (primary, replica).",
    ["pool"],
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
STATEMENT_TIMEOUTS = Counter(
    "brain_db_statement_timeouts",
    "SQL statements cancelled by the statement timeout (or a cancelled request).",
    registry=REGISTRY,
)
SERVING = Gauge(
    "brain_serving",
    "1 while gRPC health says SERVING (the database answers its probe), else 0 "
    "(with several workers: 1 while every running worker says so).",
    registry=REGISTRY,
    multiprocess_mode="livemin",
)
WATCH_STREAMS = Gauge(
    "brain_watch_streams_open",
    "WatchMemories streams open now.",
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
AUDIT_EVENTS = Counter(
    "brain_audit_events_written",
    "Audit events written by this server's transactions (counted when metrics are served).",
    registry=REGISTRY,
)

# Endpoints served by this process: measurements that cost a database round trip (audit
# events) are only taken while there is one.
_serving = 0


def serving() -> bool:
    return _serving > 0


def count_for_parent() -> None:
    """In a worker whose parent serves the endpoint: take the measurements it shows."""
    global _serving
    _serving += 1


class MetricsServer:
    """The exposition endpoint: prometheus-client's own HTTP server, in a thread."""

    def __init__(self, listen: str, registry: CollectorRegistry = REGISTRY) -> None:
        host, port = host_port(listen)
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.port: int = self._server.server_port

    def stop(self) -> None:
        global _serving
        _serving -= 1
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(listen: str, workers_dir: str | None = None) -> MetricsServer:
    """Start serving /metrics on ``listen`` (host:port); raises OSError if it cannot.

    With ``workers_dir`` (the parent of several workers) it serves the sum of what the
    workers wrote there, not this process's own registry.
    """
    global _serving
    if workers_dir is None:
        server = MetricsServer(listen)
    else:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=workers_dir)  # type: ignore[no-untyped-call]
        server = MetricsServer(listen, registry)
    _serving += 1
    return server


def worker_gone(pid: int, workers_dir: str) -> None:
    """A worker died: its live gauges (serving, streams, pools) no longer count."""
    multiprocess.mark_process_dead(pid, workers_dir)  # type: ignore[no-untyped-call]


def host_port(listen: str) -> tuple[str, int]:
    parts = urlsplit(f"//{listen}")
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"{listen!r} is not host:port")
    return parts.hostname, parts.port


def address(listen: str, port: int) -> str:
    """Where /metrics is served: ``listen`` with the port it got (``:0`` picks one)."""
    host, _ = host_port(listen)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class RpcObserver:
    """The interceptor's hook: a trace span, a request count and a latency per call."""

    def call_span(self, method: str) -> AbstractContextManager[str | None]:
        return tracing.rpc_span(method)

    def call_done(
        self, method: str, code: grpc.StatusCode, seconds: float, server_fault: bool
    ) -> None:
        RPC_REQUESTS.labels(method, code.name).inc()
        RPC_DURATION.labels(method, code.name).observe(seconds)
        tracing.end_rpc(code.name, code.value[0], server_fault)

    def rate_limited(self, key_id: str) -> None:
        RATE_LIMITED.labels(key_id).inc()


@contextmanager
def lane(name: str) -> Iterator[None]:
    """Time one retrieval lane's query."""
    started = time.perf_counter()
    try:
        yield
    finally:
        LANE_DURATION.labels(name).observe(time.perf_counter() - started)


@asynccontextmanager
async def acquire(pool: asyncpg.Pool, name: str) -> AsyncIterator[Any]:
    """A pool connection, counted as waiting until the pool hands it over."""
    waiting = POOL_WAITING.labels(name)
    waiting.inc()
    try:
        conn = await pool.acquire()
    finally:
        waiting.dec()
    POOLS.publish()
    try:
        yield conn
    finally:
        await pool.release(conn)
        POOLS.publish()


def log_query(record: Any) -> None:
    """asyncpg's query logger: count statement timeouts, and trace the statement."""
    if isinstance(record.exception, asyncpg.QueryCanceledError):
        STATEMENT_TIMEOUTS.inc()
    tracing.statement_span(record.query, record.elapsed, record.exception)


async def audit_pending(conn: asyncpg.Connection) -> bool:
    """Before a write transaction commits: whether its commit writes an audit event (the
    audit triggers note changes and append one event per tenant at commit; migration
    0003). Asked only while the endpoint is served: it costs a round trip."""
    if not serving():
        return False
    pending = await conn.fetchval("SELECT current_setting('brain.audit_pending', true)")
    return bool(pending)


POOL_CONNECTIONS_NAME = "brain_db_pool_connections"
POOL_CONNECTIONS_HELP = "Pool connections by pool and state (size, in_use, idle, max)."
# Several workers: each publishes its pools' figures as it uses them; the parent sums them.
POOL_CONNECTIONS = (
    Gauge(
        POOL_CONNECTIONS_NAME,
        POOL_CONNECTIONS_HELP,
        ["pool", "state"],
        registry=REGISTRY,
        multiprocess_mode="livesum",
    )
    if MULTIPROCESS
    else None
)


def _pool_figures(pool: asyncpg.Pool) -> dict[str, int]:
    size, idle = pool.get_size(), pool.get_idle_size()
    return {"size": size, "in_use": size - idle, "idle": idle, "max": pool.get_max_size()}


class PoolCollector(Collector):
    """Pool size, in-use and idle connections, read from the pools at scrape time."""

    def __init__(self) -> None:
        self._pools: dict[str, asyncpg.Pool] = {}

    def watch(self, name: str, pool: asyncpg.Pool) -> None:
        self._pools[name] = pool
        POOL_WAITING.labels(name)
        self.publish()

    def forget(self, pool: asyncpg.Pool) -> None:
        self._pools = {n: p for n, p in self._pools.items() if p is not pool}

    def publish(self) -> None:
        """With several workers: write this worker's figures for the parent's endpoint."""
        if POOL_CONNECTIONS is None:
            return
        for name, pool in list(self._pools.items()):
            for state, value in _pool_figures(pool).items():
                POOL_CONNECTIONS.labels(name, state).set(value)

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            POOL_CONNECTIONS_NAME, POOL_CONNECTIONS_HELP, labels=["pool", "state"]
        )
        for name, pool in list(self._pools.items()):
            for state, value in _pool_figures(pool).items():
                family.add_metric([name, state], value)
        yield family

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []


POOLS = PoolCollector()
if not MULTIPROCESS:
    REGISTRY.register(POOLS)
