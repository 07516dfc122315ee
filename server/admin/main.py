"""brain-admin: migrations, tenants and keys, run against the database as its owner.

Admin work is never done over the network API. With no database URL it works on the
embedded PostgreSQL in BRAIN_DATA_DIR, the same one `brain-server` starts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import NoReturn

import asyncpg

from brain.authz import CommandParser, add_version_argument
from brain.server.admin import audit, backup, certs, conflicts, embeddings, keys
from brain.server.admin.registry import Context, UsageError, undecodable_argument
from brain.server.runtime.config import _env, default_data_dir
from brain.server.runtime.pepper import PepperError
from brain.server.storage import admin as store
from brain.server.storage.migrate import MigrationError
from brain.server.telemetry import logs


def _path_or_none(value: str | None) -> Path | None:
    return Path(value) if value else None


class AdminParser(CommandParser):
    """brain-admin's parser and, through ``add_subparsers``, every sub-command's: a usage
    error starts ``brain-admin: error:`` as a refused command's does, and names the help
    of the sub-command it came from."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"brain-admin: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = AdminParser(prog="brain-admin", description=__doc__)
    add_version_argument(parser)
    parser.add_argument(
        "--database-url",
        default=None,  # from the environment in `database_url_of`, which names its source
        help="owner connection (BRAIN_ADMIN_DATABASE_URL, else BRAIN_DATABASE_URL); "
        "unset: the embedded PostgreSQL",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=Path(_env("DATA_DIR") or default_data_dir())
    )
    parser.add_argument("--pepper-file", type=Path, default=_path_or_none(_env("PEPPER_FILE")))
    sub = parser.add_subparsers(dest="command", required=True)

    for module in (keys, certs, backup, embeddings, audit, conflicts):
        module.register(sub)
    return parser


def database_url_of(args: argparse.Namespace) -> tuple[str | None, str]:
    """The owner URL and where it came from (the flag or which variable), for errors."""
    if args.database_url:
        return args.database_url, "--database-url"
    for name in ("ADMIN_DATABASE_URL", "DATABASE_URL"):
        if _env(name):
            return _env(name), f"BRAIN_{name}"
    return None, "the embedded PostgreSQL"


def database_error(exc: asyncpg.PostgresError | asyncpg.InterfaceError | OSError) -> str:
    """One line for a database error no command translated itself."""
    if isinstance(exc, asyncpg.InsufficientPrivilegeError):
        return (
            f"the database refused: {exc}; brain-admin works as the database owner "
            "(BRAIN_ADMIN_DATABASE_URL or --database-url with the owner role, not the server's)"
        )
    if isinstance(exc, asyncpg.PostgresError):
        return f"the database refused: {exc}"
    if isinstance(exc, asyncpg.InterfaceError):
        return f"the database connection failed: {exc}"
    return f"cannot reach the database: {exc}"


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.database_url, args.database_url_source = database_url_of(args)
    undecodable = undecodable_argument(parser, args)
    if undecodable is not None:  # before anything is read or written
        chosen, message = undecodable
        chosen.error(message)
    logs.configure("warning", "console")
    ctx = Context(args)
    try:
        asyncio.run(args.fn(ctx))
    except (UsageError, store.AdminError, MigrationError, PepperError) as exc:
        print(f"brain-admin: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:  # the reader went away (`| head`): nothing is wrong with us
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
        # Whatever a command did not translate: one line, never a traceback.
        print(f"brain-admin: error: {database_error(exc)}", file=sys.stderr)
        sys.exit(2)
    finally:
        if ctx._pg is not None:
            ctx._pg.stop()


if __name__ == "__main__":
    main()
