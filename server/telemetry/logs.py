"""Structured JSON logs (structlog). Never log a key, a secret, or memory content."""

from __future__ import annotations

import logging
import sys
from urllib.parse import urlsplit, urlunsplit

import structlog


class _CurrentStderr:
    """Whatever ``sys.stderr`` is when a line is written, not when logging was configured:
    a host (a test harness, an embedding program) may swap the stream and close the old
    one, and a log line must never fail the request that writes it."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str = "info", fmt: str = "json", worker: int | None = None) -> None:
    """Logs at ``level`` as JSON or console lines; a worker process tags each with its index."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    tag: list[structlog.types.Processor] = []
    if worker is not None:

        def add_worker(
            _: object, __: str, event: structlog.types.EventDict
        ) -> structlog.types.EventDict:
            event["worker"] = worker
            return event

        tag = [add_worker]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            *tag,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )


def redact_dsn(dsn: str) -> str:
    """A database URL fit for logs and errors: the password replaced."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "<unparseable database URL>"
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return dsn
