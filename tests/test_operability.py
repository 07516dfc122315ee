"""Operability: the Prometheus endpoint of a real server, and OpenTelemetry traces."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import structlog
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families

from brain.server.runtime.app import StartupError, start_server
from brain.server.telemetry import logs, tracing
from brain.v1 import common_pb2, memory_pb2, memory_pb2_grpc

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api, rpc_error
from .test_watch import watching

SAVE = "/brain.v1.MemoryService/SaveMemory"
SEARCH = "/brain.v1.MemoryService/SearchMemories"
WHOAMI = "/brain.v1.IdentityService/WhoAmI"


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        body: bytes = response.read()
    return body.decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition, keyed by name and label set."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def metered(pg_cluster: PgCluster, loop_thread: LoopThread) -> Iterator[BrainServer]:
    """A second real server with /metrics on its own port and a tight rate limit."""
    server = BrainServer(
        cluster=pg_cluster,
        loop=loop_thread,
        settings=server_settings(
            pg_cluster, metrics_listen="127.0.0.1:0", rate_limit=0.01, rate_burst=30
        ),
    )
    server.start()
    yield server
    server.stop()


async def test_metrics_move_after_real_calls_and_no_label_holds_content(
    metered: BrainServer,
) -> None:
    """After real calls every metric moved, and nothing the callers sent is in the exposition."""
    assert metered.running is not None and metered.running.metrics_server is not None
    port = metered.running.metrics_server.port
    assert port != metered.running.port
    tenant = unique("metrics")
    key = metered.mint_key(tenant, "alice")
    spammer = metered.mint_key(tenant, "spammer")
    spammer_id = spammer.removeprefix("brk_").split("_")[0]
    content = f"zebra quokka {unique('distinctive')} launch codes"
    before = samples(await asyncio.to_thread(scrape, port))

    async with metered.channel() as channel:
        api = Api(channel, key)
        async with watching(channel, key) as watcher:
            saved = await api.save(content)
            await watcher.next()
            during = samples(await asyncio.to_thread(scrape, port))
        assert await api.search("zebra quokka launch") == [saved.memory.id]
        bad = await rpc_error(api.get("not-a-uuid"))
        assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT
        spam = Api(channel, spammer)
        refused = 0
        for _ in range(35):
            try:
                await spam.whoami()
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                refused += 1
        assert refused >= 5
    text = await asyncio.to_thread(scrape, port)
    after = samples(text)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("brain_rpc_requests_total", method=SAVE, code="OK") >= 1
    assert moved("brain_rpc_requests_total", method=SEARCH, code="OK") >= 1
    get = "/brain.v1.MemoryService/GetMemory"
    assert moved("brain_rpc_requests_total", method=get, code="INVALID_ARGUMENT") >= 1
    assert moved("brain_rpc_duration_seconds_count", method=SAVE, code="OK") >= 1
    assert moved("brain_rpc_requests_total", method=WHOAMI, code="RESOURCE_EXHAUSTED") >= 5
    assert moved("brain_rate_limited_total", key_id=spammer_id) == refused
    # A search of the present runs both BM25 lanes as one statement, timed as "lexical".
    for lane in ("lexical", "semantic"):
        assert moved("brain_retrieval_lane_duration_seconds_count", lane=lane) >= 1
    assert moved("brain_embedder_duration_seconds_count", embedder="local") >= 2  # save, query
    assert moved("brain_embedder_batch_size_count", embedder="local") >= 2
    assert ("brain_embedder_failures_total", frozenset({("embedder", "local")})) in after
    assert moved("brain_audit_events_written_total") >= 1
    assert value(during, "brain_watch_streams_open") >= 1
    assert value(after, "brain_serving") == 1
    assert value(after, "brain_db_pool_connections", pool="primary", state="max") >= 1
    assert value(after, "brain_db_pool_connections", pool="primary", state="size") >= 1
    assert ("brain_db_pool_waiting", frozenset({("pool", "primary")})) in after
    assert "brain_db_statement_timeouts_total" in {name for name, _ in after}
    # Nothing the callers sent — content, query, secret — is in any label or anywhere.
    for secret in ("zebra", "quokka", "launch", content, key, spammer.split("_")[-1]):
        assert secret not in text
    assert spammer_id in text  # the positive control: the public key id is labelled


def test_metrics_are_off_by_default_and_never_on_the_grpc_port(
    brain_server: BrainServer, pg_cluster: PgCluster, loop_thread: LoopThread
) -> None:
    """No metrics endpoint unless asked; the gRPC port or a malformed address stops the start."""
    if brain_server.running is None:
        pytest.skip("needs an in-process server")
    assert brain_server.running.metrics_server is None
    port = free_port()
    same = server_settings(
        pg_cluster, listen=f"127.0.0.1:{port}", metrics_listen=f"127.0.0.1:{port}"
    )
    with pytest.raises(StartupError, match="gRPC port"):
        loop_thread.run(start_server(same))
    with pytest.raises(StartupError, match="metrics-listen"):
        loop_thread.run(start_server(server_settings(pg_cluster, metrics_listen="nonsense")))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The real OpenTelemetry SDK, exporting to memory, installed for one test."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.install(None)
        provider.shutdown()


async def test_an_rpc_is_one_trace_with_sql_and_embedder_spans_and_its_request_id(
    brain_server: BrainServer, channel: grpc.aio.Channel, spans: InMemorySpanExporter
) -> None:
    """A traced save is one server span with SQL and embedder children; trace id = request id."""
    api = Api(channel, brain_server.mint_key(unique("traced"), "alice"))
    logs.configure("info")
    try:
        with structlog.testing.capture_logs() as captured:
            await api.save(f"traced fact {unique('t')}")
    finally:
        logs.configure("warning")
    finished = spans.get_finished_spans()
    rpc = [s for s in finished if s.kind == SpanKind.SERVER]
    assert [s.name for s in rpc] == [SAVE.lstrip("/")]
    root = rpc[0]
    assert root.attributes is not None and root.attributes["rpc.grpc.status"] == "OK"
    trace_id = root.context.trace_id
    children = [
        s for s in finished if s.parent is not None and s.parent.span_id == root.context.span_id
    ]
    names = {s.name for s in children}
    assert "embed" in names
    assert {"db INSERT", "db SELECT"} <= names
    assert all(s.context.trace_id == trace_id for s in children)
    statements = [str((s.attributes or {}).get("db.statement", "")) for s in children]
    assert any("INSERT INTO memories" in q for q in statements)
    assert not any("traced fact" in q for q in statements)  # values are never attached
    rpc_logs = [e for e in captured if e.get("event") == "rpc" and e.get("method") == SAVE]
    assert [e["request_id"] for e in rpc_logs] == [format(trace_id, "032x")]


async def test_without_tracing_no_spans_and_request_ids_stay_random(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """With tracing off nothing is exported and request ids are random."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    api = Api(channel, brain_server.mint_key(unique("untraced"), "alice"))
    # Positive control: installed, the same provider and exporter do receive the call's span.
    tracing.install(provider)
    try:
        await api.whoami()
    finally:
        tracing.install(None)
    traced = exporter.get_finished_spans()
    assert [s.name for s in traced if s.kind == SpanKind.SERVER] == [WHOAMI.lstrip("/")]
    exporter.clear()
    logs.configure("info")
    try:
        with structlog.testing.capture_logs() as captured:
            await api.whoami()
    finally:
        logs.configure("warning")
        provider.shutdown()
    assert not tracing.enabled() and exporter.get_finished_spans() == ()
    rpc_logs = [e for e in captured if e.get("event") == "rpc" and e.get("method") == WHOAMI]
    assert len(rpc_logs) == 1 and len(rpc_logs[0]["request_id"]) == 32


async def test_embedder_failures_are_counted() -> None:
    """A failing embedder call is counted as a failure and re-raised."""
    from brain.server.domain.retrieval.embedders import (
        EmbedderError,
        InstrumentedEmbedder,
        NoEmbedder,
    )
    from brain.server.telemetry import metrics

    embedder = InstrumentedEmbedder(NoEmbedder())
    failures = metrics.EMBED_FAILURES.labels("none")
    before = failures._value.get()
    assert await embedder.embed([]) == []  # nothing to embed: not a call
    with pytest.raises(EmbedderError):
        await embedder.embed(["anything"])
    assert failures._value.get() == before + 1
    assert embedder.dimension == 0 and embedder.name == "none"


def test_otlp_export_only_when_the_endpoint_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real OTLP/HTTP receiver on loopback gets the span; without the variable, nothing."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    received: list[tuple[str, bytes]] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    receiver = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        assert tracing.configure() is None and not tracing.enabled()
        with tracing.rpc_span(SAVE) as trace_id:
            assert trace_id is None
        monkeypatch.setenv(
            "OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.server_port}"
        )
        assert tracing.configure() is not None and tracing.enabled()
        with tracing.rpc_span(SAVE) as trace_id:
            assert trace_id is not None and len(trace_id) == 32
        tracing.shutdown()  # flushes the batch
        assert not tracing.enabled()
    finally:
        tracing.install(None)
        receiver.shutdown()
        receiver.server_close()
    assert [path for path, _ in received] == ["/v1/traces"]
    sent = ExportTraceServiceRequest.FromString(received[0][1])
    exported = [
        (span.name, span.trace_id.hex())
        for resource in sent.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    assert exported == [(SAVE.lstrip("/"), trace_id)]
    service = {a.key: a.value.string_value for a in sent.resource_spans[0].resource.attributes}
    assert service["service.name"] == "brain-server"


def test_dashboard_and_alerts_use_only_metrics_the_server_exports(metered: BrainServer) -> None:
    """Every metric the Grafana dashboard and the alert rules query is one the server exports."""
    import json
    import re
    from pathlib import Path

    import yaml

    assert metered.running is not None and metered.running.metrics_server is not None
    families = text_string_to_metric_families(scrape(metered.running.metrics_server.port))
    exported = {
        f.name + suffix for f in families for suffix in ("", "_total", "_bucket", "_count", "_sum")
    }
    deploy = Path(__file__).resolve().parent.parent / "deploy"
    dashboard = json.loads((deploy / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    rules = yaml.safe_load((deploy / "alerts.yml").read_text())
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    used = {m for e in exprs for m in re.findall(r"\bbrain_[a-z_]+", e)}
    assert {"brain_rpc_requests_total", "brain_serving", "brain_db_pool_connections"} <= used
    assert used - exported == set()


def test_metrics_listen_comes_from_the_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--metrics-listen is off by default and read from BRAIN_METRICS_LISTEN or the flag."""
    import argparse

    from brain.server.runtime.config import add_server_arguments, settings_from_args

    def parsed(*argv: str) -> str | None:
        parser = argparse.ArgumentParser()
        add_server_arguments(parser)
        return settings_from_args(parser.parse_args(list(argv))).metrics_listen

    monkeypatch.delenv("BRAIN_METRICS_LISTEN", raising=False)
    assert parsed() is None  # off by default
    monkeypatch.setenv("BRAIN_METRICS_LISTEN", "0.0.0.0:9464")
    assert parsed() == "0.0.0.0:9464"
    assert parsed("--metrics-listen", "127.0.0.1:9100") == "127.0.0.1:9100"


async def test_a_statement_timeout_is_counted_and_reported_as_a_deadline(
    pg_cluster: PgCluster,
) -> None:
    """A statement the timeout cancels is DeadlineExceeded and moves the timeout counter."""
    from brain.server.errors import DeadlineExceeded
    from brain.server.storage.db import Database
    from brain.server.telemetry import metrics

    db = await Database.connect(pg_cluster.app_dsn, max_size=1)
    try:
        before = metrics.STATEMENT_TIMEOUTS._value.get()
        async with db.tenant_tx(str(uuid.uuid4()), timeout_ms=5000) as conn:
            assert await conn.fetchval("SELECT 1") == 1  # the control: no timeout, no count
        await asyncio.sleep(0)  # the query logger reports on the next loop turn
        assert metrics.STATEMENT_TIMEOUTS._value.get() == before
        with pytest.raises(DeadlineExceeded):
            async with db.tenant_tx(str(uuid.uuid4()), timeout_ms=50) as conn:
                await conn.execute("SELECT pg_sleep(30)")
        await asyncio.sleep(0)
        assert metrics.STATEMENT_TIMEOUTS._value.get() == before + 1
    finally:
        await db.close()


def test_a_call_the_client_ends_is_cancelled_or_past_its_deadline_not_a_fault(
    brain_server: BrainServer,
) -> None:
    """A save the client cancels while the server works on it, and one whose deadline
    passes there, were counted UNKNOWN, a server fault the error-ratio alert pages on. They
    are CANCELLED and DEADLINE_EXCEEDED, neither logged as "rpc failed"; a save that
    finishes is OK (control)."""
    from brain.server.telemetry import metrics

    running = brain_server.running
    assert running is not None
    method = "/brain.v1.MemoryService/SaveMemory"

    def count(code: str) -> float:
        return metrics.RPC_REQUESTS.labels(method, code)._value.get()  # type: ignore[no-any-return]

    key = brain_server.mint_key(unique("cancel"), "agent", namespaces=("n",))
    md = (("authorization", f"Bearer {key}"),)
    request = memory_pb2.SaveMemoryRequest(
        scope=common_pb2.Scope(namespace="n"), memory=common_pb2.MemoryDraft(content="x")
    )
    entered = threading.Event()
    original = running.memories.save

    async def held(*args: Any) -> Any:
        entered.set()
        await asyncio.sleep(30)  # until the client gives up on it
        return await original(*args)

    before = {code: count(code) for code in ("OK", "CANCELLED", "DEADLINE_EXCEEDED", "UNKNOWN")}
    running.memories.save = held  # type: ignore[method-assign]
    try:
        with grpc.insecure_channel(brain_server.target) as channel:
            stub = memory_pb2_grpc.MemoryServiceStub(channel)
            with structlog.testing.capture_logs() as logs:
                future = stub.SaveMemory.future(request, metadata=md, timeout=30)
                assert entered.wait(20)
                future.cancel()
                entered.clear()
                with pytest.raises(grpc.RpcError) as late:
                    stub.SaveMemory(request, metadata=md, timeout=1.0)
                assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                assert entered.is_set()  # it reached the server before its deadline

                def ended() -> float:
                    return sum(count(c) - before[c] for c in ("CANCELLED", "DEADLINE_EXCEEDED"))

                def counted() -> bool:  # (which of the two a deadline is depends on a race
                    # of the client's and the server's timers; neither is a fault)
                    return ended() >= 2 and count("CANCELLED") > before["CANCELLED"]

                deadline = time.monotonic() + 20
                while not counted():
                    assert time.monotonic() < deadline, {c: count(c) - before[c] for c in before}
                    time.sleep(0.05)
            running.memories.save = original  # type: ignore[method-assign]
            stub.SaveMemory(request, metadata=md, timeout=20)
    finally:
        running.memories.save = original  # type: ignore[method-assign]
    assert count("UNKNOWN") == before["UNKNOWN"]
    assert count("OK") == before["OK"] + 1  # control
    assert not [e for e in logs if e.get("event") == "rpc failed"]
