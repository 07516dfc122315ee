"""Structured JSON logs (structlog). Never log a key, a secret, or memory content."""

from __future__ import annotations

import logging
import re
import sys
from urllib.parse import urlsplit, urlunsplit

import structlog

_HANDLER_NAME = "brain-structured"


class _CurrentStderr:
    """Whatever ``sys.stderr`` is when a line is written, not when logging was configured:
    a host (a test harness, an embedding program) may swap the stream and close the old
    one, and a log line must never fail the request that writes it."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str = "info", fmt: str = "json", worker: int | None = None) -> None:
    """Logs at ``level`` as JSON or console lines; a worker process tags each with its index.

    Lines that libraries write through the standard ``logging`` module (asyncpg's pool,
    grpc) go through the same processors and renderer, so with ``json`` every line on the
    stream is one JSON object, a traceback included (in its ``exception`` field)."""
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
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,  # (first: library lines go without it)
        structlog.processors.add_log_level,
        *tag,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    # JSON renders a traceback into one string field; the console renderer prints it whole.
    exc_info: list[structlog.types.Processor] = (
        [structlog.processors.format_exc_info] if fmt == "json" else []
    )
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # One write per line, its newline included: stderr writes through, and print()'s
        # two writes let the workers' lines interleave on the shared stream ('{..}{..}').
        logger_factory=structlog.WriteLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(_CurrentStderr())
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            # A library's line carries no request's identity: asyncpg's pool warns from
            # tasks that copied the context of whichever call released a connection, so
            # its outage warnings named a request that had ended long before.
            foreign_pre_chain=[*shared[1:], structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)  # configured again (a worker, a test): one handler, not two
    root.addHandler(handler)
    # Libraries' own INFO lines (an HTTP client's line per request, say) stay out at the
    # default level; their warnings and errors come through, as JSON.
    root.setLevel(max(numeric, logging.WARNING) if numeric > logging.DEBUG else numeric)
    logging.captureWarnings(True)  # Python warnings too, as log lines rather than raw text


def fatal(program: str, message: str) -> None:
    """A process's last word, ``<program>: error: <message>``, as a log line on the log
    stream: with JSON logs a pipeline reading the stream keeps the one line that says why
    the process stopped, instead of a plain line it drops. Logged as critical, the highest
    level, so that no --log-level (critical included) hides it."""
    structlog.get_logger(program).critical(f"{program}: error: {message}")


def redact_dsn(dsn: str) -> str:
    """A database URL fit for logs and errors: every password replaced, whether in the
    URL's user part (``user:pw@``), in its query (``?password=pw``, as libpq accepts it)
    or in a ``key=value`` connection string (``host=h password=pw``)."""
    if "://" not in dsn:  # a libpq key=value string, or anything else: never echo a secret
        return _PASSWORD_SETTING.sub(r"\1***", dsn)
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "<unparseable database URL>"
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        parts = parts._replace(netloc=netloc)
    if parts.query:
        query = "&".join(
            f"{name}=***" if name.lower() in _SECRET_PARAMETERS else f"{name}{eq}{value}"
            for name, eq, value in (item.partition("=") for item in parts.query.split("&"))
        )
        parts = parts._replace(query=query)
    return urlunsplit(parts)


# libpq parameters that carry a secret (a password, or a file's passphrase).
_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
_PASSWORD_SETTING = re.compile(
    r"((?:^|\s)(?:password|sslpassword)\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE
)
