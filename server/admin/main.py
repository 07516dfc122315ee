"""brain-admin: migrations, tenants and keys, run against the database as its owner.

Admin work is never done over the network API. With no database URL it works on the
embedded PostgreSQL in BRAIN_DATA_DIR, the same one `brain-server` starts.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from brain.authz import CommandParser, add_version_argument
from brain.server.admin import audit, backup, certs, conflicts, embeddings, keys
from brain.server.admin.registry import Context, UsageError
from brain.server.runtime.config import _env, default_data_dir
from brain.server.runtime.pepper import PepperError
from brain.server.storage import admin as store
from brain.server.storage.migrate import MigrationError
from brain.server.telemetry import logs


def _path_or_none(value: str | None) -> Path | None:
    return Path(value) if value else None


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="brain-admin", description=__doc__)
    add_version_argument(parser)
    parser.add_argument(
        "--database-url",
        default=_env("ADMIN_DATABASE_URL") or _env("DATABASE_URL"),
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


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logs.configure("warning", "console")
    ctx = Context(args)
    try:
        asyncio.run(args.fn(ctx))
    except (UsageError, store.AdminError, MigrationError, PepperError) as exc:
        print(f"brain-admin: error: {exc}", file=sys.stderr)
        sys.exit(2)
    finally:
        if ctx._pg is not None:
            ctx._pg.stop()


if __name__ == "__main__":
    main()
