"""What every brain-admin sub-command shares: its context, the command registry, output, errors
and the checks of its arguments (durations, counts, UTF-8).

Sub-command modules (`keys`, `audit`, `backup`, `certs`, `embeddings`) import this module and
add their commands with `command`; `main` builds the parser from them. Nothing here imports a
sub-command, so the dependencies point one way.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from brain.server.runtime import embedded
from brain.server.runtime.bootstrap import prepare_embedded
from brain.server.runtime.pepper import load_pepper
from brain.server.storage import setlocal
from brain.server.telemetry import logs

_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# The longest duration any option takes: an expiry or grace period past it is a typo, and
# one far past it overflows the dates it is added to (Python's end at year 9999).
MAX_DURATION = timedelta(days=100 * 365)
INT32_MAX = 2**31 - 1  # the largest value of a PostgreSQL integer column


class UsageError(Exception):
    """A brain-admin command was asked for something it cannot do; the message says why."""


def parse_duration(text: str) -> timedelta:
    """``90d``, ``12h``, ``30m``, ``45s``, ``2w``; at most ``MAX_DURATION``.

    Raises ``argparse.ArgumentTypeError``: options take durations as their ``type``, so
    argparse names the option in the error."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} must look like 90d, 12h, 30m, 45s or 2w")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds > MAX_DURATION.total_seconds():
        raise argparse.ArgumentTypeError(
            f"{text!r} is longer than {MAX_DURATION.days // 365} years"
        )
    return timedelta(seconds=seconds)


def positive_duration(text: str) -> timedelta:
    """A duration more than zero (an expiry of ``0d`` would mint an expired key)."""
    value = parse_duration(text)
    if not value:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than zero")
    return value


def count(least: int, most: int = INT32_MAX) -> Callable[[str], int]:
    """An option's ``type`` for a whole number from ``least`` to ``most`` (by default the
    largest a PostgreSQL integer column holds)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not least <= value <= most:
            raise argparse.ArgumentTypeError(f"{value} is not between {least} and {most}")
        return value

    return parse


def undecodable_argument(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[argparse.ArgumentParser, str] | None:
    """The first string argument of the chosen command that is not UTF-8 (with the parser
    of the sub-command that took it), or None.

    Python decodes command-line bytes that are not UTF-8 to lone surrogates, which no
    database column, log line or file can hold; one check here covers every argument of
    every sub-command, present and future."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(str(getattr(args, action.dest, "")))
            found = undecodable_argument(chosen, args) if chosen is not None else None
            if found is not None:
                return found
            continue
        value = getattr(args, action.dest, None)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and not _is_utf8(item):
                name = "/".join(action.option_strings) or action.metavar or action.dest
                return parser, f"argument {name}: {_shown(item)} is not UTF-8 text"
    return None


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(text: str) -> str:
    """The bytes the argument was given as, where Python kept them (surrogateescape)."""
    try:
        return repr(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return ascii(text)


def admin_principal() -> str:
    """How brain-admin appears in audit events: ``admin:<os user>``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        user = str(os.getuid())
    return f"admin:{user}"


@asynccontextmanager
async def acting(
    conn: asyncpg.Connection, settings: Mapping[str, str] | None = None
) -> AsyncIterator[asyncpg.Connection]:
    """A transaction whose writes the audit triggers attribute to ``admin:<os user>``.

    Every brain-admin write runs in one. The principal (and any other ``settings``) is set
    with ``SET LOCAL`` (storage/setlocal.py), as the server sets a request's: Citus carries
    that to the workers where the triggers of distributed tables fire, while a session-level
    ``set_config`` stays on the coordinator and those events would name the database role
    (``db:brain_owner``). Inside a transaction already open it is a savepoint, whose
    settings last until the outer transaction ends.
    """
    async with conn.transaction():
        await setlocal.set_local(conn, {"brain.principal": admin_principal(), **(settings or {})})
        yield conn


class Context:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.database_url: str | None = args.database_url
        # Which flag or variable gave the URL, so that an error names what the user set.
        self.database_url_source: str = getattr(args, "database_url_source", "--database-url")
        self.data_dir: Path = args.data_dir
        self._pg: embedded.EmbeddedPostgres | None = None

    @property
    def pepper(self) -> bytes:
        if self.database_url is None:
            self.require_embedded_cluster()  # else a mistyped --data-dir gets a new pepper
        return load_pepper(self.args.pepper_file, self.data_dir, database_url=self.database_url)

    def require_embedded_cluster(self) -> None:
        """Refuse a data directory that holds no embedded cluster. brain-admin works on the
        database brain-server made there; creating one (and its pepper) because a path was
        mistyped would mint keys and tenants into a database no server reads."""
        if not (self.data_dir / "pg" / "PG_VERSION").exists():
            raise UsageError(
                f"no embedded PostgreSQL in {self.data_dir} (it has no pg/PG_VERSION): "
                f"start brain-server once with BRAIN_DATA_DIR={self.data_dir} to create it, "
                "or give the database with --database-url"
            )

    async def owner_dsn(self) -> str:
        if self.database_url is not None:
            if urlsplit(self.database_url).scheme not in ("postgres", "postgresql"):
                raise UsageError(
                    f"{self.database_url_source} {logs.redact_dsn(self.database_url)!r} is not "
                    "a postgresql:// URL"
                )
            return self.database_url
        self.require_embedded_cluster()
        try:
            self._pg = embedded.start(self.data_dir / "pg")
        except embedded.StartFailed as exc:
            raise UsageError(str(exc)) from exc
        await prepare_embedded(self._pg)
        return self._pg.owner_dsn

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[asyncpg.Connection]:
        dsn = await self.owner_dsn()
        try:
            conn = await asyncpg.connect(dsn)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise UsageError(f"cannot connect to {logs.redact_dsn(dsn)}: {exc}") from exc
        try:
            yield conn  # writes go in `acting(conn)`: their audit events name the admin
        finally:
            await conn.close()


def output(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, default=str, indent=2))
    else:
        print(text)


Handler = Callable[[Context], Awaitable[None]]


def command(subparsers: Any, name: str, fn: Handler, help: str) -> argparse.ArgumentParser:
    """Add one sub-command that runs ``fn(ctx)``; every command takes ``--json``."""
    new: argparse.ArgumentParser = subparsers.add_parser(name, help=help, description=help)
    new.set_defaults(fn=fn)
    new.add_argument("--json", action="store_true", help="print JSON")
    return new
