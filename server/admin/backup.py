"""brain-admin backup / restore: one tenant as JSON Lines (see storage/backup.py).

    brain-admin backup --tenant T --out FILE     # 0600; holds memory content, never key secrets
    brain-admin restore FILE                     # into a database without that tenant

For whole databases use pg_dump / pg_restore as the owner (README, Deployment).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from brain.server.admin.registry import Context, UsageError, acting, command
from brain.server.storage import backup as store


async def cmd_backup(ctx: Context) -> None:
    a = ctx.args
    out: Path = a.out
    pepper = ctx.pepper  # a missing pepper is refused before anything is written
    tmp = out.with_name(out.name + ".tmp")
    rows = 0
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            async with ctx.connect() as conn:
                async for line in store.backup(conn, pepper, a.tenant):
                    f.write(line + "\n")
                    rows += 1
                    if rows % 10_000 == 0:
                        print(f"  {rows} lines…", file=sys.stderr)
        tmp.replace(out)
    except store.BackupError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(str(exc)) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    print(f"backed up tenant {a.tenant}: {rows - 2} rows -> {out}")


def _utf8_lines(f: BinaryIO) -> Iterator[str]:
    """The file's lines as text; a line that is not UTF-8 is refused by its number, as a
    line that is not JSON is (inside the restore's transaction: nothing is restored)."""
    for number, line in enumerate(f, 1):
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise store.BackupError(f"line {number} is not UTF-8 text: {exc}") from exc


async def cmd_restore(ctx: Context) -> None:
    a = ctx.args
    pepper = ctx.pepper  # a missing pepper is refused before anything is read or written
    try:
        with a.file.open("rb") as f:  # a CLI: nothing else runs on this loop
            async with ctx.connect() as conn, acting(conn):
                done = await store.restore(conn, pepper, _utf8_lines(f))
    except OSError as exc:
        raise UsageError(f"cannot read {a.file}: {exc}") from exc
    except store.BackupError as exc:
        raise UsageError(f"{exc} (nothing was restored)") from exc
    rows = ", ".join(f"{n} {t}" for t, n in done["rows"].items())
    if a.json:
        print(json.dumps(done, indent=2))
    else:
        print(f"restored tenant {done['tenant']} ({done['tenant_id']}): {rows}")


def register(subparsers: Any) -> None:
    """Add ``backup`` and ``restore`` to brain-admin."""
    p = command(subparsers, "backup", cmd_backup, "write one tenant to a JSON Lines file")
    p.add_argument("--tenant", required=True)
    p.add_argument("--out", type=Path, required=True, help="file to write (mode 0600)")
    p = command(subparsers, "restore", cmd_restore, "restore a tenant's backup into this database")
    p.add_argument("file", type=Path)
