"""Losing the database, for real: a server with its own embedded PostgreSQL whose postmaster
is killed with SIGKILL, and a write that the database refuses with SQLSTATE 53100.

The cluster here is private to this module; the session-wide test cluster is never touched.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import psutil
import pytest
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc

from brain.authz import Caller, Confinement, KeyRecord, MethodClass, RequestScope
from brain.server.domain import watch as watch_module
from brain.server.errors import Unavailable
from brain.server.runtime.app import RunningServer, start_server
from brain.server.runtime.config import Settings
from brain.v1 import common_pb2, memory_pb2, memory_pb2_grpc

from .conftest import LoopThread

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Outage:
    """A running server on its own embedded cluster, with a sync channel and its dev key."""

    def __init__(self, running: RunningServer, key: str, loop: LoopThread) -> None:
        self.running = running
        self.key = key
        self.loop = loop
        self.channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
        self.memories = memory_pb2_grpc.MemoryServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    @property
    def md(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.key}"),)

    def save(self, content: str) -> memory_pb2.SaveMemoryResponse:
        return self.memories.SaveMemory(  # type: ignore[no-any-return]
            memory_pb2.SaveMemoryRequest(
                scope=common_pb2.Scope(namespace="ops"),
                memory=common_pb2.MemoryDraft(content=content),
            ),
            metadata=self.md,
            timeout=30,
        )

    def get(self, memory_id: str) -> common_pb2.Memory:
        return self.memories.GetMemory(  # type: ignore[no-any-return]
            memory_pb2.GetMemoryRequest(scope=common_pb2.Scope(namespace="ops"), id=memory_id),
            metadata=self.md,
            timeout=30,
        ).memory

    def status(self) -> int:
        return int(self.health.Check(health_pb2.HealthCheckRequest(), timeout=10).status)

    def owner_sql(self, query: str) -> None:
        pg = self.running.embedded_pg
        assert pg is not None

        async def run() -> None:
            conn = await asyncpg.connect(pg.owner_dsn)
            try:
                await conn.execute(query)
            finally:
                await conn.close()

        self.loop.run(run())


def eventually(check: Callable[[], bool], seconds: float = 60) -> None:
    """Poll ``check`` until it holds; the bound is a safety net, not a speed assertion."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition did not hold in time"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def outage(loop_thread: LoopThread) -> Iterator[Outage]:
    # Not under pytest's temp root: as root, PostgreSQL runs as another user, who must
    # traverse the path at every restart, and any pytest session of the same user makes
    # /tmp/pytest-of-<user> private again (0700) when it starts; so a supervisor's restart
    # failed whenever another suite started on the machine meanwhile.
    root = Path(tempfile.mkdtemp(prefix="brain-outage-"))
    os.chmod(root, 0o755)
    settings = Settings(
        listen="127.0.0.1:0",
        database_url=None,  # embedded: the server starts and supervises its own cluster
        data_dir=root / "data",
        log_level="warning",
        embedder="none",
        rate_limit=1000.0,
        rate_burst=1000,
        health_interval_seconds=0.2,
        statement_timeout_ms=1000,  # a call with no deadline is abandoned after 1 + 5 s
        dev_key_file=root / "key",
    )
    try:
        running = loop_thread.run(start_server(settings))
        server = Outage(running, (root / "key").read_text().strip(), loop_thread)
        try:
            yield server
        finally:
            server.channel.close()
            loop_thread.run(running.stop(grace=1.0))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _watching_caller() -> Caller:
    key = KeyRecord(
        tenant_id="00000000-0000-0000-0000-000000000000", tenant_name="local", key_id="k",
        principal="dev", permissions=frozenset(), confinement=Confinement(),
        labels=frozenset({"team"}), secret_hash=b"", expires_at=None, revoked_at=None,
    )  # fmt: skip
    return Caller(
        key=key,
        method="/brain.v1.MemoryService/WatchMemories",
        method_class=MethodClass.READ,
        scope=RequestScope(namespace="ops"),
        request_id="outage-test",
    )


def code_of(call: Callable[[], Any]) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code()  # type: ignore[attr-defined,no-any-return]


def test_killed_postmaster_is_unavailable_not_serving_then_heals(outage: Outage) -> None:
    """SIGKILL of the embedded postmaster: new calls and a live Watch get UNAVAILABLE (not
    UNKNOWN) and are logged, health turns NOT_SERVING; the supervisor restarts PostgreSQL,
    health returns to SERVING and the same server (same pool) serves reads and writes again."""
    pg = outage.running.embedded_pg
    assert pg is not None
    before = outage.save("written before the outage").memory.id
    assert outage.status() == SERVING

    watch = outage.memories.WatchMemories(
        memory_pb2.WatchMemoriesRequest(scope=common_pb2.Scope(namespace="ops")),
        metadata=outage.md,
        timeout=60,
    )
    assert next(watch).cursor  # the opening marker: the stream is live
    outage.running.supervisor.hold_restarts = True  # observe the outage before it heals
    old_pid = pg.postmaster_pid()
    assert old_pid is not None
    with structlog.testing.capture_logs() as logs:
        os.kill(old_pid, signal.SIGKILL)
        # A call already past authentication (a live Watch) ends UNAVAILABLE too.
        assert code_of(lambda: next(watch)) == grpc.StatusCode.UNAVAILABLE
        eventually(lambda: outage.status() == NOT_SERVING)
        assert code_of(lambda: outage.save("written during the outage")) == (
            grpc.StatusCode.UNAVAILABLE
        )
        assert code_of(lambda: outage.get(before)) == grpc.StatusCode.UNAVAILABLE
        # A live Watch re-checks its key every few seconds; during an outage that is
        # UNAVAILABLE too (the interceptor's KeyStoreUnavailable once escaped as INTERNAL).
        with pytest.raises(Unavailable):
            outage.loop.run(
                watch_module._ensure_key_still_valid(outage.running.memories, _watching_caller())
            )
    failed = [e for e in logs if e.get("event") == "rpc failed"]
    assert {e["method"] for e in failed} >= {
        "/brain.v1.MemoryService/SaveMemory",
        "/brain.v1.MemoryService/GetMemory",
    }
    assert {e["status"] for e in failed} == {"UNAVAILABLE"}
    assert outage.key not in repr(logs)

    outage.running.supervisor.hold_restarts = False
    try:
        eventually(lambda: outage.status() == SERVING)
    except AssertionError:
        print("PostgreSQL log:", (pg.data_dir / "log").read_text()[-3000:])  # why not back
        raise
    assert pg.postmaster_pid() not in (None, old_pid)
    after = outage.save("written after the outage").memory.id
    assert outage.get(before).content == "written before the outage"
    assert outage.get(after).content == "written after the outage"


def test_a_postmaster_killed_while_starting_is_started_again(outage: Outage) -> None:
    """A postmaster killed while it starts leaves a ``postmaster.pid`` cut short (7 of its
    8 lines). The wheel fails on such a file, so every restart failed and the server stayed
    down until someone deleted it by hand; the supervisor now removes the dead
    postmaster's file and starts PostgreSQL again, and the server serves."""
    pg = outage.running.embedded_pg
    assert pg is not None
    before = outage.save("written before the cut-short start").memory.id
    outage.running.supervisor.hold_restarts = True
    old_pid = pg.postmaster_pid()
    assert old_pid is not None
    pidfile = pg.data_dir / "postmaster.pid"
    lines = pidfile.read_text().splitlines()
    assert len(lines) == 8  # the whole file of a running postmaster (control)
    os.kill(old_pid, signal.SIGKILL)
    eventually(lambda: not psutil.pid_exists(old_pid))
    pidfile.write_text("\n".join(lines[:7]) + "\n")  # as a start killed before "ready"
    eventually(lambda: outage.status() == NOT_SERVING)
    outage.running.supervisor.hold_restarts = False
    try:
        eventually(lambda: outage.status() == SERVING)
    except AssertionError:
        print("PostgreSQL log:", (pg.data_dir / "log").read_text()[-3000:])
        raise
    assert pg.postmaster_pid() not in (None, old_pid)
    assert outage.get(before).content == "written before the cut-short start"


def test_disk_full_is_resource_exhausted_with_a_clear_message(outage: Outage) -> None:
    """A write the database refuses with SQLSTATE 53100 (disk full) is RESOURCE_EXHAUSTED
    saying so; reads keep working and writes succeed once space is back."""
    outage.running.supervisor.hold_restarts = False  # whatever the test before left
    eventually(lambda: outage.status() == SERVING)
    kept = outage.save("saved while the disk had room").memory.id
    # PostgreSQL raises the real disk_full condition from inside the write (a tmpfs that
    # fills up needs mount rights the test cannot assume).
    outage.owner_sql(
        """CREATE FUNCTION test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN RAISE EXCEPTION 'could not extend file: No space left on device'
                 USING ERRCODE = 'disk_full'; END $$;
           CREATE TRIGGER test_disk_full BEFORE INSERT ON memories
               FOR EACH ROW EXECUTE FUNCTION test_disk_full();"""
    )
    try:
        with pytest.raises(grpc.RpcError) as err:
            outage.save("refused for lack of space")
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        assert "out of disk space" in err.value.details()  # type: ignore[attr-defined]
        assert outage.get(kept).content == "saved while the disk had room"
        assert outage.status() == SERVING
    finally:
        outage.owner_sql("DROP TRIGGER test_disk_full ON memories; DROP FUNCTION test_disk_full();")
    assert outage.save("saved once space is back").memory.content == "saved once space is back"


def test_a_frozen_database_answers_unavailable_instead_of_never(outage: Outage) -> None:
    """PostgreSQL stopped with SIGSTOP is alive but silent and enforces no statement timeout:
    a call whose client set no deadline is answered UNAVAILABLE once it is stuck past the
    statement timeout (not held forever), health turns NOT_SERVING (the probe is abandoned,
    not awaited), and after SIGCONT the same server answers again and health is SERVING."""
    outage.running.supervisor.hold_restarts = False
    eventually(lambda: outage.status() == SERVING)
    before = outage.save("written before the freeze").memory.id
    pg = outage.running.embedded_pg
    assert pg is not None
    pid = pg.postmaster_pid()
    assert pid is not None
    postmaster = psutil.Process(pid)
    frozen = [postmaster, *postmaster.children(recursive=True)]
    for proc in frozen:
        proc.send_signal(signal.SIGSTOP)
    try:
        no_deadline = memory_pb2.GetMemoryRequest(
            scope=common_pb2.Scope(namespace="ops"), id=before
        )
        with pytest.raises(grpc.RpcError) as err:
            outage.memories.GetMemory(no_deadline, metadata=outage.md)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        # A probe against the frozen server answers "not reachable" in its own time; the
        # outer bound only turns a stalled probe into a failure instead of a hang.
        probe = asyncio.wait_for(outage.running.db.ping(0.5), timeout=5)
        assert outage.loop.run(probe) is False
        eventually(lambda: outage.status() == NOT_SERVING)
    finally:
        for proc in frozen:
            proc.send_signal(signal.SIGCONT)
    eventually(lambda: outage.status() == SERVING)
    assert outage.get(before).content == "written before the freeze"
