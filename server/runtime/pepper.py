"""The server pepper: the HMAC key for API-key hashes and value fingerprints.

Embedded mode keeps it in ``<data dir>/pepper`` (created once, mode 0600). A team
deployment passes ``BRAIN_PEPPER_FILE``; brain-server and brain-admin must share it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

PEPPER_BYTES = 32


class PepperError(Exception):
    pass


def load_pepper(pepper_file: Path | None, data_dir: Path, *, create: bool) -> bytes:
    """Read the pepper; in embedded mode create it on first use."""
    path = pepper_file or data_dir / "pepper"
    if not path.exists():
        if pepper_file is not None or not create:
            raise PepperError(
                f"pepper file {path} does not exist; create one with "
                "`head -c 32 /dev/urandom > FILE` and pass it as BRAIN_PEPPER_FILE"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(PEPPER_BYTES))
    value = path.read_bytes()
    if len(value) < 16:
        raise PepperError(f"pepper file {path} holds fewer than 16 bytes")
    return value
