"""Database supervision: health follows the database, and the embedded cluster is restarted.

A background probe asks the database a trivial question every ``interval`` seconds. While
it gets no answer, gRPC health says NOT_SERVING for the server and every service (load
balancers and clients stop sending; calls that arrive anyway get UNAVAILABLE). With the
embedded PostgreSQL, a postmaster that died is started again in place; the asyncpg pool
replaces its dead connections on the next checkout, so no server restart is needed.
Health returns to SERVING with the first answered probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Iterable

import structlog
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2

from brain.server.runtime import embedded
from brain.server.storage.db import Database
from brain.server.telemetry import metrics

_log = structlog.get_logger("brain.supervisor")
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class DatabaseSupervisor:
    """Keeps health in step with the database and restarts a dead embedded cluster."""

    def __init__(
        self,
        db: Database,
        health: health_aio.HealthServicer,
        services: Iterable[str],
        pg: embedded.EmbeddedPostgres | None = None,
        interval: float = 2.0,
    ) -> None:
        self.db = db
        self.health = health
        self.services = ("", *services)
        self.pg = pg
        self.interval = interval
        self.serving = True
        # Tests hold restarts to observe an outage before it heals.
        self.hold_restarts = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="database-supervisor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:  # the supervisor must outlive any one failed probe
                _log.exception("database probe failed unexpectedly")
            await asyncio.sleep(self.interval)

    async def check(self) -> bool:
        """Probe once (restarting a dead embedded cluster), set health; True if reachable."""
        ok = await self.db.ping(max(self.interval, 1.0))
        if not ok and self.pg is not None and not self.hold_restarts:
            ok = await self._restart_embedded()
        metrics.SERVING.set(1 if ok else 0)
        if ok != self.serving:
            self.serving = ok
            status = SERVING if ok else NOT_SERVING
            for service in self.services:
                await self.health.set(service, status)
            if ok:
                _log.info("database reachable again; health SERVING")
            else:
                _log.error("database unreachable; health NOT_SERVING until it returns")
        return ok

    async def _restart_embedded(self) -> bool:
        assert self.pg is not None
        try:
            restarted = await asyncio.to_thread(self.pg.restart_if_dead)
        except (OSError, subprocess.SubprocessError, AssertionError, RuntimeError) as exc:
            # e.g. backends of the dead postmaster still hold its shared memory: next probe.
            _log.warning("embedded PostgreSQL did not restart yet", error=str(exc))
            return False
        return restarted and await self.db.ping(max(self.interval, 1.0))
