"""Ordered SQL migrations, tracked in a table, applied under an advisory lock."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg
import structlog

_log = structlog.get_logger("brain.migrate")
_LOCK_ID = 0x6272_6169_6E00  # "brain\0"
APP_GROUP_ROLE = "brain_app"
# Under row-level security PostgreSQL runs a query's own condition before the policies,
# and so through an index, only when the condition's function is LEAKPROOF. Text match
# (tsvector @@ tsquery) is not marked so, although its answer depends only on its two
# arguments and it raises no error about the row it reads; unmarked, the GIN indexes
# cannot serve a lexical search and each one reads the whole table. Only a superuser may
# mark a function: `migrate` does when it can, and the server warns at start when not.
TEXT_MATCH = "pg_catalog.ts_match_vq(tsvector, tsquery)"
MARK_TEXT_MATCH = f"ALTER FUNCTION {TEXT_MATCH} LEAKPROOF"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def filename(self) -> str:
        return f"{self.version:04d}_{self.name}.sql"


@dataclass(frozen=True)
class SchemaStatus:
    """How a database's migration history compares with this release's migrations."""

    pending: list[Migration]  # shipped here, not applied there
    unknown: list[str]  # applied there (``NNNN_name``), not shipped here: a newer release


def load_migrations() -> list[Migration]:
    """Every ``NNNN_name.sql`` shipped in the package, in order."""
    folder = resources.files("brain.server.storage").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append(Migration(int(number), rest.removesuffix(".sql"), entry.read_text()))
    found.sort(key=lambda m: m.version)
    return found


_IDENT = re.compile(r"[A-Za-z0-9_$\x80-\U0010ffff]")
_BEGIN_ATOMIC = re.compile(r"(?i)begin\s+atomic\b")
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_\x80-\U0010ffff]*)?\$")


def split_statements(sql: str) -> list[str]:
    """The statements of a migration, each without its ``;``, as PostgreSQL's lexer sees
    them: a ``;`` inside a string ('...', E'...'), a quoted identifier, a dollar-quoted
    body or a comment (``--``, nested ``/* */``) does not end one. Comments before a
    statement and comment-only pieces are dropped. SQL-standard bodies (``BEGIN ATOMIC``),
    whose statements end with ``;``, are refused: write such functions with a ``$$`` body."""
    statements: list[str] = []
    start = i = 0
    code = False  # the current piece holds more than blanks and comments
    n = len(sql)
    while i < n:
        c = sql[i]
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if sql.startswith("/*", i):
            depth, i = 1, i + 2
            while depth and i < n:
                if sql.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif sql.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            if depth:
                raise ValueError("unterminated /* comment")
            continue
        if c == ";":
            if code:
                statements.append(sql[start:i].strip())
            start, i, code = i + 1, i + 1, False
            continue
        if c.isspace():
            i += 1
            continue
        if not code:
            start, code = i, True  # a statement starts at its first word, after comments
        prev = sql[i - 1] if i else " "
        if c == "'":
            escape = prev in "eE" and (i < 2 or not _IDENT.match(sql[i - 2]))
            i += 1
            while True:
                if i >= n:
                    raise ValueError("unterminated string")
                if escape and sql[i] == "\\":
                    i += 2
                elif sql[i] == "'":
                    if sql.startswith("''", i):
                        i += 2
                    else:
                        i += 1
                        break
                else:
                    i += 1
            continue
        if c == '"':
            end = i + 1
            while True:
                end = sql.find('"', end)
                if end < 0:
                    raise ValueError("unterminated quoted identifier")
                if sql.startswith('""', end):
                    end += 2
                    continue
                break
            i = end + 1
            continue
        if c == "$" and not _IDENT.match(prev):
            tag = _DOLLAR_TAG.match(sql, i)
            if tag:
                end = sql.find(tag.group(), tag.end())
                if end < 0:
                    raise ValueError(f"unterminated {tag.group()} body")
                i = end + len(tag.group())
                continue
        if _IDENT.match(c):  # a word (or a $1 parameter) whole, so its own $ stays in it
            if _BEGIN_ATOMIC.match(sql, i) and not _IDENT.match(prev):
                raise ValueError("BEGIN ATOMIC bodies cannot be split; use a $$ body")
            while i < n and _IDENT.match(sql[i]):
                i += 1
            continue
        i += 1
    if code:
        statements.append(sql[start:].strip())
    return statements


class MigrationError(Exception):
    """The database's migration history does not match this release."""


async def migrate(dsn: str, migrations: list[Migration] | None = None) -> list[Migration]:
    """Apply pending migrations as the connecting (owner) role; return the applied ones.

    ``migrations`` (default: all this release ships) lets a test build an older schema.
    """
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_ID)
        try:
            return await _apply(conn, load_migrations() if migrations is None else migrations)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_ID)
    finally:
        await conn.close()


async def _apply(conn: asyncpg.Connection, migrations: list[Migration]) -> list[Migration]:
    await _ensure_app_role(conn)
    await conn.execute(
        """CREATE TABLE IF NOT EXISTS brain_schema_migrations (
               version integer PRIMARY KEY,
               name text NOT NULL,
               checksum text NOT NULL,
               applied_at timestamptz NOT NULL DEFAULT now())"""
    )
    # The server checks, read-only, that it runs against a fully migrated schema.
    await conn.execute(f"GRANT SELECT ON brain_schema_migrations TO {APP_GROUP_ROLE}")
    rows = await conn.fetch("SELECT version, name, checksum FROM brain_schema_migrations")
    applied = {r["version"]: r["checksum"] for r in rows}
    unknown = _unknown(rows)
    if unknown:
        raise MigrationError(newer_schema_message(unknown))
    done = []
    citus = bool(await conn.fetchval("SELECT 1 FROM pg_extension WHERE extname = 'citus'"))
    for migration in migrations:
        if migration.version in applied:
            if applied[migration.version] != migration.checksum:
                raise MigrationError(
                    f"migration {migration.version}_{migration.name} was changed after it "
                    "was applied; add a new migration instead"
                )
            continue
        async with conn.transaction():
            if citus:
                # On a Citus coordinator: one connection per node for the whole migration,
                # or DDL on a distributed function after DDL on a distributed table in the
                # same transaction is refused.
                await conn.execute("SET LOCAL citus.multi_shard_modify_mode = 'sequential'")
            # One statement at a time: Citus refuses some DDL (CREATE INDEX, ALTER TABLE
            # ... ENABLE ROW LEVEL SECURITY) sent inside a multi-statement string; on plain
            # PostgreSQL the result is the same, in the same transaction.
            for statement in split_statements(migration.sql):
                if not await _extension_present(conn, statement):
                    await conn.execute(statement)
            await conn.execute(
                "INSERT INTO brain_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.checksum,
            )
        _log.info("migration applied", version=migration.version, name=migration.name)
        done.append(migration)
    await _mark_text_match(conn)
    return done


_CREATE_EXTENSION = re.compile(r"(?i)CREATE\s+EXTENSION\s+IF\s+NOT\s+EXISTS\s+([a-z_][a-z0-9_]*)")


async def _extension_present(conn: asyncpg.Connection, statement: str) -> bool:
    """Whether ``statement`` is a bare ``CREATE EXTENSION IF NOT EXISTS x`` and x exists.

    On PostgreSQL that statement is then a no-op; Citus still sends it to every worker,
    where it fails unless this role owns the extension (a superuser created it)."""
    match = _CREATE_EXTENSION.fullmatch(statement)
    if match is None:
        return False
    return bool(
        await conn.fetchval("SELECT 1 FROM pg_extension WHERE extname = $1", match.group(1))
    )


IS_LEAKPROOF = "SELECT proleakproof FROM pg_proc WHERE oid = $1::regprocedure"


async def text_match_is_leakproof(conn: asyncpg.Connection) -> bool:
    """Whether lexical searches can use the GIN indexes under row-level security."""
    return bool(await conn.fetchval(IS_LEAKPROOF, TEXT_MATCH))


async def _mark_text_match(conn: asyncpg.Connection) -> None:
    """Mark text match LEAKPROOF (see TEXT_MATCH) when this role may; checked on every
    migrate, since a restore into a new cluster brings its own catalog."""
    if await text_match_is_leakproof(conn):
        return
    if await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"):
        await conn.execute(MARK_TEXT_MATCH)
        _log.info("text match marked leakproof", function=TEXT_MATCH)


async def _ensure_app_role(conn: asyncpg.Connection) -> None:
    exists = await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", APP_GROUP_ROLE)
    if exists:
        return
    try:
        await conn.execute(f"CREATE ROLE {APP_GROUP_ROLE} NOLOGIN")
    except asyncpg.InsufficientPrivilegeError as exc:
        raise MigrationError(
            f"role {APP_GROUP_ROLE} does not exist and this role may not create it; "
            f"ask a DBA to run: CREATE ROLE {APP_GROUP_ROLE} NOLOGIN"
        ) from exc


def _unknown(rows: list[asyncpg.Record]) -> list[str]:
    known = {m.version for m in load_migrations()}
    return [f"{r['version']:04d}_{r['name']}" for r in rows if r["version"] not in known]


def newer_schema_message(unknown: list[str]) -> str:
    """One line for an operator whose database was migrated by a newer release."""
    return (
        f"the database schema is newer than this release: it has migration(s) "
        f"{', '.join(sorted(unknown))} that this code does not know; run the release "
        "that applied them (or a later one)"
    )


async def status(dsn: str) -> SchemaStatus:
    """Compare the database's applied migrations with this release's."""
    conn = await asyncpg.connect(dsn)
    try:
        has_table = await conn.fetchval("SELECT to_regclass('brain_schema_migrations') IS NOT NULL")
        rows = []
        if has_table:
            rows = list(await conn.fetch("SELECT version, name FROM brain_schema_migrations"))
        applied = {r["version"] for r in rows}
        return SchemaStatus(
            pending=[m for m in load_migrations() if m.version not in applied],
            unknown=_unknown(rows),
        )
    finally:
        await conn.close()


async def pending(dsn: str) -> list[Migration]:
    """Migrations this release has that the database has not applied."""
    return (await status(dsn)).pending
