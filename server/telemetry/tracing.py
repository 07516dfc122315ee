"""OpenTelemetry traces: a span per RPC, per SQL statement and per embedder call.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; then spans go out by OTLP over HTTP
(the exporter reads the standard ``OTEL_EXPORTER_OTLP_*`` variables itself). While off,
every span here is the API's no-op span and costs next to nothing. With tracing on, an
RPC's trace id is its ``request_id`` in the logs.

Spans carry method names, status codes, statement text (parameterised: the values are
never attached) and sizes — never memory content.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

_log = structlog.get_logger("brain.tracing")
SERVICE_NAME = "brain-server"
# The provider spans go to; None: tracing is off.
_provider: TracerProvider | None = None


def install(provider: TracerProvider | None) -> None:
    """Send spans to ``provider`` (None: tracing off). Tests install an in-memory one."""
    global _provider
    _provider = provider


def configure() -> TracerProvider | None:
    """Turn tracing on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; the provider, or None."""
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    if not endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": os.environ.get("OTEL_SERVICE_NAME", SERVICE_NAME)}
        )
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    install(provider)
    _log.info("tracing on", exporter="otlp/http")
    return provider


def shutdown() -> None:
    """Flush and stop the installed provider, if any."""
    provider = _provider
    install(None)
    if provider is not None:
        provider.shutdown()


def enabled() -> bool:
    return _provider is not None


def tracer() -> trace.Tracer:
    if _provider is None:
        return trace.NoOpTracer()
    return _provider.get_tracer("brain.server")


@contextmanager
def rpc_span(method: str) -> Iterator[str | None]:
    """The span of one RPC; yields its trace id (32 hex digits), or None when off."""
    if _provider is None:
        yield None
        return
    with tracer().start_as_current_span(
        method.lstrip("/"),
        kind=SpanKind.SERVER,
        attributes={"rpc.system": "grpc", "rpc.method": method},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield format(span.get_span_context().trace_id, "032x")


def end_rpc(code_name: str, code_value: int, server_fault: bool) -> None:
    """Mark the current RPC span with its gRPC status (an error only if the server failed)."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attribute("rpc.grpc.status_code", code_value)
    span.set_attribute("rpc.grpc.status", code_name)
    if server_fault:
        span.set_status(Status(StatusCode.ERROR, code_name))


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Span]:
    """A child span of whatever is current (e.g. an embedder call)."""
    with tracer().start_as_current_span(name, attributes=attributes) as current:
        yield current


def mark_failed(current: Span, reason: str) -> None:
    current.set_status(Status(StatusCode.ERROR, reason))


def statement_span(query: str, elapsed: float, failed: BaseException | None) -> None:
    """Record a finished SQL statement as a span of the current trace (asyncpg's query
    logger reports after the fact, so the span is back-dated by its elapsed time)."""
    if _provider is None:
        return
    end = time.time_ns()
    verb = query.lstrip().split(None, 1)[0].upper() if query.strip() else "SQL"
    statement = tracer().start_span(
        f"db {verb}",
        kind=SpanKind.CLIENT,
        start_time=end - int(elapsed * 1e9),
        attributes={"db.system": "postgresql", "db.statement": query[:2000]},
    )
    if failed is not None:
        statement.set_status(Status(StatusCode.ERROR, type(failed).__name__))
    statement.end(end_time=end)
