"""A write that committed but answered after the deadline is retried without a duplicate.

The delay is real: a TCP relay on loopback between client and server holds the server's
bytes, so the server commits and answers while the client sees nothing until its attempt
deadline passes and it retries with the same idempotency key. No part is mocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio

from brain.clients import AsyncBrainClient, BrainClient, RetryPolicy, Scope, errors
from brain.v1 import common_pb2, memory_pb2

from .conftest import BrainServer, unique

# Attempts of 1 s inside a 30 s call: the held first attempt always times out first.
RETRY = RetryPolicy(max_attempts=5, initial_backoff=0.05, max_backoff=0.2, attempt_timeout=1.0)


class Relay:
    """A TCP relay whose server-to-client direction can be held back and released."""

    def __init__(self, target: str) -> None:
        self.host, port = target.rsplit(":", 1)
        self.port = int(port)
        self.flowing = asyncio.Event()
        self.flowing.set()
        self._server: asyncio.Server | None = None

    @property
    def target(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connect, "127.0.0.1", 0)

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _connect(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        server_r, server_w = await asyncio.open_connection(self.host, self.port)
        await asyncio.gather(
            self._pump(client_r, server_w, None),
            self._pump(server_r, client_w, self.flowing),
            return_exceptions=True,
        )

    @staticmethod
    async def _pump(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: asyncio.Event | None
    ) -> None:
        try:
            while data := await reader.read(65536):
                if gate is not None:
                    await gate.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def relay_to(brain_server: BrainServer) -> AsyncIterator[Relay]:
    relay = Relay(brain_server.target)
    await relay.start()
    try:
        yield relay
    finally:
        relay.flowing.set()
        await relay.close()


class Attempts:
    """Records each attempt's idempotency key and status (sync and asyncio interceptors)."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.codes: list[grpc.StatusCode] = []
        self._lock = threading.Lock()

    def record_key(self, request: Any) -> None:
        with self._lock:
            self.keys.append(getattr(request, "idempotency_key", ""))

    def record_code(self, code: grpc.StatusCode) -> None:
        with self._lock:
            self.codes.append(code)


class SyncAttempts(Attempts, grpc.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        self.record_key(request)
        outcome = continuation(details, request)
        self.record_code(outcome.code())
        return outcome


class AsyncAttempts(Attempts, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        self.record_key(request)
        call = await continuation(details, request)
        self.record_code(await call.code())
        return call


async def eventually(check: Callable[[], bool], what: str, within: float = 15.0) -> None:
    """Poll ``check`` (which may block) until it holds."""
    end = time.monotonic() + within
    while not await asyncio.to_thread(check):
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.05)


def count(brain_server: BrainServer, query: str, *args: Any) -> int:
    return int(brain_server.sql(query, *args)[0][0])


def stored_keys(brain_server: BrainServer, api_key: str) -> list[str]:
    """The idempotency keys the server recorded for this API key (read as the owner)."""
    rows = brain_server.sql(
        "SELECT idempotency_key FROM idempotency_keys WHERE key_id = $1", api_key.split("_")[1]
    )
    return [r[0] for r in rows]


async def test_async_save_answered_late_is_replayed_not_duplicated(
    brain_server: BrainServer,
) -> None:
    """A save that commits while its answer is held is retried with its key: one row, REPLAYED."""
    ns = unique("ns")
    key = brain_server.mint_key(unique("t"), "agent:slow-network", namespaces=(ns,))
    content = f"The deploy freeze starts on Friday {unique('c')}"
    rows_of = "SELECT count(*) FROM memories WHERE namespace = $1 AND content = $2"
    attempts = AsyncAttempts()
    async with relay_to(brain_server) as relay, AsyncBrainClient(
        relay.target, key, scope=Scope(namespace=ns), timeout=30, retry=RETRY,
        interceptors=[attempts],
    ) as client:  # fmt: skip
        await client.whoami()  # connect while bytes flow
        # The server's first save loads its embedding model, which on a busy machine takes
        # longer than an attempt: then the held save never commits in its first attempt and
        # the race below is lost. Load it now, while bytes flow.
        await client.save(f"Warming up {unique('w')}")
        relay.flowing.clear()
        save = asyncio.create_task(client.save(content))
        # The first attempt commits on the server, but its answer is held...
        await eventually(lambda: count(brain_server, rows_of, ns, content) == 1, "committed")
        # ...until the client gives up on it and tries again.
        await eventually(
            lambda: grpc.StatusCode.DEADLINE_EXCEEDED in attempts.codes, "attempt timed out"
        )
        relay.flowing.set()
        saved = await save
    assert saved.outcome == memory_pb2.SAVE_OUTCOME_REPLAYED
    assert count(brain_server, rows_of, ns, content) == 1
    warm_up = attempts.keys[1]  # after WhoAmI (the warm-up may have taken several attempts)
    save_keys = [k for k in attempts.keys[1:] if k != warm_up]
    assert len(save_keys) >= 2 and len(set(save_keys)) == 1
    assert save_keys[0].startswith("client-")
    assert sorted(stored_keys(brain_server, key)) == sorted([warm_up, save_keys[0]])


async def test_sync_update_answered_late_is_applied_once(brain_server: BrainServer) -> None:
    """A blind update that commits while its answer is held is retried: one new version."""
    ns = unique("ns")
    key = brain_server.mint_key(unique("t"), "agent:slow-network", namespaces=(ns,))
    attempts = SyncAttempts()
    async with relay_to(brain_server) as relay:
        with BrainClient(
            relay.target, key, scope=Scope(namespace=ns), timeout=30, retry=RETRY,
            interceptors=[attempts],
        ) as client:  # fmt: skip
            saved = await asyncio.to_thread(client.save, "Standup is at 9:30")
            memory_id = saved.memory.id
            versions = "SELECT count(*) FROM memories WHERE memory_id = $1::uuid"
            relay.flowing.clear()
            update = asyncio.create_task(
                asyncio.to_thread(client.update, memory_id, content="Standup is at 9:45")
            )
            await eventually(lambda: count(brain_server, versions, memory_id) == 2, "committed")
            await eventually(
                lambda: grpc.StatusCode.DEADLINE_EXCEEDED in attempts.codes, "attempt timed out"
            )
            relay.flowing.set()
            updated = await update
    assert updated.memory.version == 2 and updated.memory.content == "Standup is at 9:45"
    assert count(brain_server, versions, memory_id) == 2
    update_keys = attempts.keys[1:]
    assert len(update_keys) >= 2 and len(set(update_keys)) == 1
    # Positive control: the save and the update each got a key of their own.
    assert attempts.keys[0] != update_keys[0]
    assert sorted(stored_keys(brain_server, key)) == sorted([attempts.keys[0], update_keys[0]])


async def test_a_failed_write_names_its_key_for_a_safe_retry(brain_server: BrainServer) -> None:
    """When the retries run out, the error carries the key; retrying with it replays."""
    ns = unique("ns")
    key = brain_server.mint_key(unique("t"), "agent:slow-network", namespaces=(ns,))
    content = f"Backups run at 02:00 {unique('c')}"
    rows_of = "SELECT count(*) FROM memories WHERE namespace = $1 AND content = $2"
    # The held answer makes the attempt time out; its deadline reaches the server too, so
    # it must outlast a save on a busy machine (the save has to commit, then the answer is
    # held back by the relay).
    once = RetryPolicy(max_attempts=1, attempt_timeout=5.0)
    async with (
        relay_to(brain_server) as relay,
        AsyncBrainClient(
            relay.target, key, scope=Scope(namespace=ns), timeout=30, retry=once
        ) as client,
    ):
        await client.whoami()
        relay.flowing.clear()
        try:
            await client.save(content)
        except errors.DeadlineExceeded as exc:
            failed = exc
        else:
            raise AssertionError("the held save answered in time")
        await eventually(lambda: count(brain_server, rows_of, ns, content) == 1, "committed")
        relay.flowing.set()
        again = await client.save(content, idempotency_key=failed.idempotency_key)
    assert failed.idempotency_key.startswith("client-")
    assert again.outcome == memory_pb2.SAVE_OUTCOME_REPLAYED
    assert count(brain_server, rows_of, ns, content) == 1


async def test_forget_erases_the_content_kept_for_replays(brain_server: BrainServer) -> None:
    """Idempotency records keep no content, only the memory's id: after a forget, replays of
    its save and of its update re-read it and show it erased."""
    ns = unique("ns")
    key = brain_server.mint_key(
        unique("t"), "alice", namespaces=(ns,),
        permissions="memories:read,memories:write,memories:forget",
    )  # fmt: skip
    secret, kept = f"The vault code is 4711 {unique('c')}", f"Lunch is at noon {unique('c')}"
    async with AsyncBrainClient(brain_server.target, key, scope=Scope(namespace=ns)) as client:
        forgotten = await client.save(secret, idempotency_key="save-secret", tags=["vault"])
        await client.update(forgotten.memory.id, importance=0.9, idempotency_key="touch-secret")
        control = await client.save(kept, idempotency_key="save-kept")
        await client.forget(forgotten.memory.id, reason="leaked")
        replayed = await client.save(secret, idempotency_key="save-secret", tags=["vault"])
        replayed_update = await client.update(
            forgotten.memory.id, importance=0.9, idempotency_key="touch-secret"
        )
        replayed_control = await client.save(kept, idempotency_key="save-kept")
    stored = {
        r["idempotency_key"]: (r["record"], r["memory_id"])
        for r in brain_server.sql(
            "SELECT idempotency_key, memory_id::text, to_jsonb(k)::text AS record "
            "FROM idempotency_keys k WHERE key_id = $1",
            key.split("_")[1],
        )
    }
    assert set(stored) == {"save-secret", "touch-secret", "save-kept"}
    # No record holds content, tags or a response: only which memory the request produced.
    for record, memory_id in stored.values():
        assert "4711" not in record and "vault" not in record and "noon" not in record
        assert '"response"' not in record
        assert memory_id in record  # control: the scanned text is the whole record
    assert stored["save-secret"][1] == stored["touch-secret"][1] == forgotten.memory.id
    assert replayed.outcome == memory_pb2.SAVE_OUTCOME_REPLAYED
    assert (replayed.memory.id, replayed.memory.content) == (forgotten.memory.id, "")
    assert list(replayed.memory.tags) == []
    assert replayed.memory.status == common_pb2.MEMORY_STATUS_RETRACTED
    assert (replayed_update.memory.id, replayed_update.memory.content) == (forgotten.memory.id, "")
    # Positive control: a memory nobody forgot replays with its content, re-read by id.
    assert stored["save-kept"][1] == control.memory.id
    assert replayed_control.outcome == memory_pb2.SAVE_OUTCOME_REPLAYED
    assert (replayed_control.memory.id, replayed_control.memory.content) == (
        control.memory.id,
        kept,
    )


async def test_brain_mcp_saves_carry_the_clients_key(brain_server: BrainServer) -> None:
    """brain-mcp's remember goes through the client, so its save carries the client's key."""
    from .test_mcp_proxy import brain_env, call, mcp_session

    ns = unique("ns")
    key = brain_server.mint_key(unique("t"), "agent:mcp", user="alice", namespaces=(ns,))
    async with mcp_session(brain_env(brain_server.target, key, "alice", ns)) as session:
        saved = await call(session, "remember", content=f"The build cache lives in {unique('w')}")
    assert not saved.is_error
    keyed = brain_server.sql(
        "SELECT idempotency_key, memory_id FROM idempotency_keys WHERE key_id = $1",
        key.split("_")[1],
    )
    assert [(r[0][:7], str(r[1])) for r in keyed] == [("client-", saved.structured_content["id"])]


async def test_idempotency_keys_are_kept_for_a_retention_period(brain_server: BrainServer) -> None:
    """A key older than the retention (24 h) is forgotten: reusing it is a new request."""
    ns = unique("ns")
    key = brain_server.mint_key(unique("t"), "alice", namespaces=(ns,))
    key_id = key.split("_")[1]
    async with AsyncBrainClient(brain_server.target, key, scope=Scope(namespace=ns)) as client:
        await client.save("Retros are on Thursdays", idempotency_key="old")
        await client.save("Demos are on Fridays", idempotency_key="recent")
        brain_server.sql(
            "UPDATE idempotency_keys SET created_at = now() - interval '25 hours' "
            "WHERE key_id = $1 AND idempotency_key = 'old'",
            key_id,
        )
        reused = await client.save("Planning is on Mondays", idempotency_key="old")
        # Positive control: a key inside the retention still binds its first request.
        try:
            await client.save("Planning is on Tuesdays", idempotency_key="recent")
        except errors.AlreadyExists:
            pass
        else:
            raise AssertionError("a recent idempotency key accepted a different request")
    assert reused.outcome == memory_pb2.SAVE_OUTCOME_CREATED
    assert (
        count(
            brain_server,
            "SELECT count(*) FROM idempotency_keys WHERE key_id = $1 AND created_at < now() - "
            "interval '24 hours'",
            key_id,
        )
        == 0
    )
