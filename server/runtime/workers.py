"""Several server processes on one port: ``brain-server --workers N``.

One Python process answers gRPC on one core; a search spends much of its time in Python
(protobuf, the interceptor, fusion). So the parent starts the embedded PostgreSQL once
(migrated, pepper and dev key made), reserves the port, and spawns N workers that each
bind it with ``SO_REUSEPORT`` — the kernel spreads new connections over them — and each
open their own connection pool. The parent then only supervises: it restarts a worker
that dies and a postmaster that dies, and on SIGTERM/SIGINT asks every worker to drain
(each stops as a single server does, within the grace period), then stops PostgreSQL.
A worker dies with its parent (``PR_SET_PDEATHSIG``), so a killed parent leaves none.

What operators and agents see stays one server's: the per-key rate limit is one bucket
per key in a file every worker maps (``SharedRateLimiter``), and ``--metrics-listen`` is
served by the parent, adding up what the workers write (prometheus-client's multiprocess
mode); both live in a private temporary folder the parent removes when it stops. The
query-vector cache stays per worker (a cache, not a promise).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from dataclasses import replace
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import structlog

from brain.authz import SharedRateLimiter
from brain.server.runtime import embedded, ports
from brain.server.runtime.bootstrap import prepare_embedded
from brain.server.runtime.config import Settings
from brain.server.runtime.pepper import PepperError, load_pepper, pepper_path
from brain.server.runtime.startup import StartupError, serve_metrics, server_credentials
from brain.server.telemetry import logs, metrics

_log = structlog.get_logger("brain.workers")
PR_SET_PDEATHSIG = 1


class WorkerStartupError(Exception):
    """A worker could not start; it printed its one-line reason itself."""

    def __init__(self, code: int) -> None:
        super().__init__(f"worker exited with {code}")
        self.code = code


def reserve_port(listen: str) -> tuple[socket.socket, str]:
    """Bind ``listen`` with SO_REUSEPORT (port 0 picks one) and return it as host:port.

    The bound socket never listens; it only holds the port, after ``ports.ensure_free``
    proved no other program (another brain-server's reuse-port group included) listens
    on it. Workers join it in the same reuse-port group.
    """
    ports.ensure_free(listen)  # another server's reuse-port group must not be joined
    host, port, family = ports.split(listen)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {listen}: the address is in use or not valid") from exc
    bound = sock.getsockname()[1]
    return sock, (f"[{host}]:{bound}" if family == socket.AF_INET6 else f"{host}:{bound}")


class SharedState:
    """The parent's private folder: the rate-limit buckets and the workers' metric files."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="brain-server-"))  # mode 0700
        self.rate_limits = self.root / "rate-limits"
        SharedRateLimiter.create(self.rate_limits)
        self.metrics_dir = self.root / "metrics"
        self.metrics_dir.mkdir()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _worker_main(
    settings: Settings | None,
    index: int,
    ready: Event,
    parent: int = 0,
    later: Connection | None = None,
) -> None:
    """A worker process: one server, as ``brain-server --workers 1`` runs it; it ends with
    its parent (``parent``: its pid). Without ``settings`` it imports the server, then
    waits for them on ``later``: the parent is meanwhile starting PostgreSQL."""
    with contextlib.suppress(OSError, AttributeError):  # Linux only; elsewhere best effort
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if parent and os.getppid() != parent:
        # The parent died before the death signal was asked for (a worker still starting
        # when it was killed): no signal will come, and an orphan would hold the port,
        # so that the next brain-server could not listen on it.
        return
    from brain.server.runtime.app import run  # the servicers: the workers' own import

    if settings is None:
        assert later is not None
        try:
            settings = later.recv()
        except EOFError:  # the parent did not start after all (it logged why)
            return
        finally:
            later.close()
    assert settings is not None
    logs.configure(settings.log_level, settings.log_format, worker=index)
    try:
        asyncio.run(run(settings, ready=ready.set))
    except StartupError as exc:
        logs.fatal("brain-server", str(exc))
        sys.exit(2)
    except KeyboardInterrupt:
        pass


_TRACKER_QUIET = "ignore:resource_tracker:UserWarning"


class Workers:
    """The parent: spawns, supervises and stops the workers."""

    def __init__(self, settings: Settings, count: int) -> None:
        self.settings = settings
        self.count = count
        # The workers' events are semaphores, which multiprocessing's resource tracker (a
        # process of its own, started with our -W options) cleans up when this process is
        # killed, with a plain-text warning on the log stream that every line of which is
        # JSON. Its clean-up is the right outcome, so its warning is kept out.
        if _TRACKER_QUIET not in sys.warnoptions:
            sys.warnoptions.append(_TRACKER_QUIET)
        self.context = multiprocessing.get_context("spawn")
        self.procs: dict[int, Any] = {}
        self.ready: dict[int, Event] = {}  # kept: a child unpickles its event after start()
        self.waiting: dict[int, Connection] = {}  # early workers' ends of their pipes
        self.stopping = threading.Event()

    def spawn(self, index: int, *, wait: bool) -> None:
        self._start(index, self.settings)
        if wait:
            self.wait_ready(index)

    def spawn_early(self, index: int) -> None:
        """Start a worker that imports the server while this process is still starting
        PostgreSQL; `release` gives it its settings. A restart is served about as much
        sooner as the import takes (the two run on two cores)."""
        later, self.waiting[index] = self.context.Pipe(duplex=False)
        self._start(index, None, later)
        later.close()  # the child holds its end

    def release(self, index: int) -> None:
        """Send an early worker the settings it waits for (`spawn_early`)."""
        send = self.waiting.pop(index)
        with contextlib.suppress(OSError):  # it died: `wait_ready` reports its exit code
            send.send(self.settings)
        send.close()

    def wait_ready(self, index: int) -> None:
        """Wait until a worker serves; the first worker's startup errors are the server's,
        reported once."""
        proc, ready = self.procs[index], self.ready[index]
        while not ready.wait(0.1):
            if proc.exitcode is not None:
                raise WorkerStartupError(proc.exitcode)

    def _start(self, index: int, settings: Settings | None, later: Any = None) -> None:
        ready = self.ready[index] = self.context.Event()
        proc = self.context.Process(
            target=_worker_main,
            args=(settings, index, ready, os.getpid(), later),
            name=f"brain-server-worker-{index}",
        )
        proc.start()
        self.procs[index] = proc

    def supervise(self, pg: embedded.EmbeddedPostgres | None, metrics_dir: Path | None) -> None:
        """Until stopped: restart a worker or a postmaster that died."""
        while not self.stopping.wait(self.settings.health_interval_seconds):
            for index, proc in list(self.procs.items()):
                if proc.exitcode is not None and not self.stopping.is_set():
                    _log.error("worker died; starting it again", worker=index, code=proc.exitcode)
                    if metrics_dir is not None:
                        metrics.worker_gone(proc.pid, str(metrics_dir))
                    self.spawn(index, wait=False)
            if pg is not None:
                try:  # (the workers report the outage itself to their callers)
                    pg.restart_if_dead()
                except Exception as exc:
                    _log.warning(
                        "embedded PostgreSQL did not restart yet",
                        error=" ".join(str(exc).split()) or type(exc).__name__,
                    )

    def stop(self) -> None:
        """SIGTERM every worker (each drains within the grace period), then wait for them."""
        for proc in self.procs.values():
            if proc.exitcode is None:
                proc.terminate()
        for proc in self.procs.values():
            proc.join(self.settings.grace_seconds + 10)
            if proc.exitcode is None:
                proc.kill()
                proc.join()


def serve(settings: Settings) -> int:
    """Run ``settings.workers`` server processes on one port; the exit code for main."""
    workers = Workers(settings, settings.workers)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: workers.stopping.set())
    pg = None
    reserved = None
    state = SharedState()
    metrics_server = None
    try:
        server_credentials(settings)  # a TLS file gRPC would refuse stops us before the database
        try:
            pepper = load_pepper(
                settings.pepper_file, settings.data_dir, database_url=settings.database_url
            )
            reserved, listen = reserve_port(settings.listen)
        except (PepperError, OSError) as exc:
            raise StartupError(str(exc)) from exc
        metrics_at = None
        if settings.metrics_listen:  # workers started from here on write their values there
            os.environ[metrics.MULTIPROCESS_ENV] = str(state.metrics_dir)
            metrics_server = serve_metrics(
                settings, reserved.getsockname()[1], str(state.metrics_dir)
            )
            if metrics_server is not None:
                metrics_at = metrics.address(settings.metrics_listen, metrics_server.port)
        shared = replace(
            settings,
            listen=listen,
            reuse_port=True,
            rate_limit_file=state.rate_limits,
            metrics_listen=None,
            metrics_in_parent=metrics_at,
        )
        workers.spawn_early(0)
        if settings.database_url is None:
            try:
                pg = embedded.start(settings.data_dir / "pg")
            except embedded.StartFailed as exc:
                raise StartupError(str(exc)) from exc
            asyncio.run(_prepare(pg, pepper, settings))
            # The workers get a database URL, so they are told the pepper file too.
            pepper_file = pepper_path(settings.pepper_file, settings.data_dir, database_url=None)
            shared = replace(
                shared, database_url=pg.app_dsn, pepper_file=pepper_file, dev_key_file=None
            )
        workers.settings = shared
        workers.release(0)
        workers.wait_ready(0)
        for index in range(1, settings.workers):
            workers.spawn(index, wait=False)
        _log.info(
            "workers started",
            workers=settings.workers,
            listen=listen,
            pid=os.getpid(),
            metrics=metrics_at,
        )
        workers.supervise(pg, state.metrics_dir if metrics_server is not None else None)
        _log.info("shutting down workers", grace_seconds=settings.grace_seconds)
        return 0
    except StartupError as exc:
        logs.fatal("brain-server", str(exc))
        return 2
    except WorkerStartupError as exc:
        return exc.code
    finally:
        workers.stopping.set()
        for send in workers.waiting.values():  # an early worker ends on the closed pipe
            send.close()
        workers.stop()
        if reserved is not None:
            reserved.close()
        if metrics_server is not None:
            metrics_server.stop()
        if pg is not None:
            pg.stop()
        os.environ.pop(metrics.MULTIPROCESS_ENV, None)
        state.remove()


async def _prepare(pg: embedded.EmbeddedPostgres, pepper: bytes, settings: Settings) -> None:
    await prepare_embedded(pg)
    if settings.dev_key_file is not None:
        from brain.server.runtime.devkey import ensure_dev_key

        await ensure_dev_key(pg.owner_dsn, pepper, settings.dev_key_file)
