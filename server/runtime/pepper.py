"""The server pepper: the HMAC key for API-key hashes and value fingerprints.

Embedded mode keeps it in ``<data dir>/pepper`` (created once, mode 0600). A team
deployment passes ``BRAIN_PEPPER_FILE``; brain-server and brain-admin must share it, so with
a database URL the file is required: a pepper made up on the spot would hash keys the other
side cannot verify.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

import structlog

PEPPER_BYTES = 32
MISSING_WITH_DATABASE_URL = (
    "a database URL needs the pepper the server and brain-admin share: pass --pepper-file "
    "FILE or set BRAIN_PEPPER_FILE (create one with `head -c 32 /dev/urandom > FILE`)"
)
_log = structlog.get_logger("brain.pepper")


class PepperError(Exception):
    pass


def pepper_path(pepper_file: Path | None, data_dir: Path, *, database_url: str | None) -> Path:
    """The pepper file to read: the one given, else (embedded only) ``<data dir>/pepper``."""
    if pepper_file is not None:
        return pepper_file
    if database_url is not None:
        raise PepperError(MISSING_WITH_DATABASE_URL)
    return data_dir / "pepper"


def load_pepper(pepper_file: Path | None, data_dir: Path, *, database_url: str | None) -> bytes:
    """Read the pepper; in embedded mode (no database URL) create it on first use.

    Refuses a database URL without a pepper file. Warns (not refuses) when the file is
    readable by its group or others: a mounted secret is often 0644 in a container whose
    only user is the server's, yet on a shared host that is a leak the operator should see.
    """
    path = pepper_path(pepper_file, data_dir, database_url=database_url)
    if not path.exists():
        if pepper_file is not None:
            raise PepperError(
                f"pepper file {path} does not exist; create one with "
                "`head -c 32 /dev/urandom > FILE` and pass it as BRAIN_PEPPER_FILE"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(PEPPER_BYTES))
    try:
        value = path.read_bytes()
        mode = path.stat().st_mode
    except OSError as exc:
        raise PepperError(f"cannot read pepper file {path}: {exc.strerror or exc}") from exc
    if len(value) < 16:
        raise PepperError(f"pepper file {path} holds fewer than 16 bytes")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        _log.warning(
            "the pepper file is readable by others than its owner; chmod 600 it",
            pepper_file=str(path),
            mode=oct(stat.S_IMODE(mode)),
        )
    _log.info("pepper loaded", pepper_file=str(path))  # the path only, never the value
    return value
