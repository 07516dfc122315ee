"""A thin test-side wrapper over the generated stubs: one key, one default scope."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.timestamp_pb2 import Timestamp

from brain.v1 import (
    audit_pb2_grpc,
    common_pb2,
    identity_pb2,
    identity_pb2_grpc,
    memory_pb2,
    memory_pb2_grpc,
    review_pb2_grpc,
)

from .conftest import unique


def ts(value: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(value)
    return out


@dataclass
class Api:
    channel: grpc.aio.Channel
    key: str
    namespace: str = "proj"
    user_id: str = ""
    session_id: str = ""

    @property
    def md(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.key}"),)

    def scope(self, **overrides: str) -> common_pb2.Scope:
        fields = {
            "namespace": self.namespace,
            "user_id": self.user_id,
            "session_id": self.session_id,
        }
        fields.update(overrides)
        return common_pb2.Scope(**fields)

    @property
    def memories(self) -> memory_pb2_grpc.MemoryServiceStub:
        return memory_pb2_grpc.MemoryServiceStub(self.channel)

    @property
    def review(self) -> review_pb2_grpc.ReviewServiceStub:
        return review_pb2_grpc.ReviewServiceStub(self.channel)

    @property
    def audit(self) -> audit_pb2_grpc.AuditServiceStub:
        return audit_pb2_grpc.AuditServiceStub(self.channel)

    async def whoami(self) -> identity_pb2.WhoAmIResponse:
        stub = identity_pb2_grpc.IdentityServiceStub(self.channel)
        return await stub.WhoAmI(identity_pb2.WhoAmIRequest(), metadata=self.md)

    async def save(
        self, content: str, *, supersedes: Iterable[str] = (), idempotency_key: str = "",
        scope: common_pb2.Scope | None = None, **draft: Any,
    ) -> memory_pb2.SaveMemoryResponse:  # fmt: skip
        return await self.memories.SaveMemory(
            memory_pb2.SaveMemoryRequest(
                scope=scope or self.scope(),
                memory=common_pb2.MemoryDraft(content=content, **draft),
                supersedes=list(supersedes),
                idempotency_key=idempotency_key,
            ),
            metadata=self.md,
        )

    async def get(self, memory_id: str, **time: Any) -> common_pb2.Memory:
        response = await self.memories.GetMemory(
            memory_pb2.GetMemoryRequest(
                scope=self.scope(), id=memory_id, time=common_pb2.TimeTravel(**time)
            ),
            metadata=self.md,
        )
        return response.memory

    async def search(self, query: str, *, limit: int = 10, **kw: Any) -> list[str]:
        """Ids of the hits, best first."""
        response = await self.memories.SearchMemories(
            memory_pb2.SearchMemoriesRequest(scope=self.scope(), query=query, limit=limit, **kw),
            metadata=self.md,
        )
        return [h.memory.id for h in response.hits]

    async def update(
        self, memory_id: str, paths: list[str], expected_version: int = 0, **patch: Any
    ) -> common_pb2.Memory:
        response = await self.memories.UpdateMemory(
            memory_pb2.UpdateMemoryRequest(
                scope=self.scope(),
                id=memory_id,
                patch=common_pb2.MemoryDraft(**patch),
                update_mask=FieldMask(paths=paths),
                expected_version=expected_version,
            ),
            metadata=self.md,
        )
        return response.memory

    async def forget(self, memory_id: str) -> memory_pb2.ForgetMemoryResponse:
        return await self.memories.ForgetMemory(
            memory_pb2.ForgetMemoryRequest(scope=self.scope(), id=memory_id), metadata=self.md
        )

    async def history(self, memory_id: str) -> list[common_pb2.Memory]:
        response = await self.memories.GetMemoryHistory(
            memory_pb2.GetMemoryHistoryRequest(scope=self.scope(), id=memory_id), metadata=self.md
        )
        return list(response.versions)

    async def list_all(self, page_size: int = 50, **kw: Any) -> list[common_pb2.Memory]:
        out: list[common_pb2.Memory] = []
        token = ""
        while True:
            response = await self.memories.ListMemories(
                memory_pb2.ListMemoriesRequest(
                    scope=self.scope(), page_size=page_size, page_token=token, **kw
                ),
                metadata=self.md,
            )
            out.extend(response.memories)
            token = response.next_page_token
            if not token:
                return out

    async def lexical(self, query: str, **kw: Any) -> list[memory_pb2.SearchHit]:
        """Every lexical hit (no relevance floor, up to 50); ``kw`` are request fields."""
        response = await self.memories.SearchMemories(
            memory_pb2.SearchMemoriesRequest(
                scope=self.scope(), query=query, limit=50, min_relevance=0,
                mode=memory_pb2.SEARCH_MODE_LEXICAL, **kw,
            ),
            metadata=self.md,
        )  # fmt: skip
        return list(response.hits)

    async def export(self, cursor: str = "", **kw: Any) -> list[memory_pb2.ExportMemoriesResponse]:
        call = self.memories.ExportMemories(
            memory_pb2.ExportMemoriesRequest(scope=self.scope(), cursor=cursor, **kw),
            metadata=self.md,
        )
        return [item async for item in call]


async def rpc_error(coro: Any) -> grpc.aio.AioRpcError:
    """Await ``coro`` expecting a gRPC error, and return it."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await coro
    return err.value


class JsonEndpoint(ThreadingHTTPServer):
    """A real JSON-over-HTTP model server on 127.0.0.1 (embeddings, rerank, chat).

    Subclasses decide each reply in `answer`: a status and a JSON payload, or None to hang
    up without answering. Every request is recorded with its path and Authorization header.
    `released` is set at teardown, so an answer that waits on it stops waiting.
    """

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _JsonHandler)
        self.requests: list[dict[str, Any]] = []
        self.released = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(self, body: Any) -> tuple[int, Any] | None:
        raise NotImplementedError


class _JsonHandler(BaseHTTPRequestHandler):
    server: JsonEndpoint

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        reply = self.server.answer(body)
        if reply is None:
            self.close_connection = True
            return
        status, payload = reply
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        pass


E = TypeVar("E", bound=JsonEndpoint)


@contextmanager
def search_params(memories: Any, **params: Any) -> Iterator[None]:
    """The in-process server's retrieval parameters changed for the block (a small
    candidate budget, to reach the budget paths with a few rows)."""
    saved = memories.params
    memories.params = dataclasses.replace(saved, **params)
    try:
        yield
    finally:
        memories.params = saved


@asynccontextmanager
async def tuned_writer(server: Any) -> AsyncIterator[tuple[Api, Any]]:
    """A writer of a fresh tenant and namespace on the in-process server, with the server's
    memory reads (for `search_params`); skips when the server runs out of process."""
    if server.running is None:
        pytest.skip("needs the in-process server to set search parameters")
    async with grpc.aio.insecure_channel(server.target) as channel:
        api = Api(channel, server.mint_key(unique("t"), "w"), namespace=unique("ns"))
        yield api, server.running.memories


@contextmanager
def serving(server: E) -> Iterator[E]:
    """Serve ``server`` on a thread until the block ends, then release and close it."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.released.set()
        server.shutdown()
        server.server_close()
        thread.join()


def server_setting(name: str, *argv: str) -> Any:
    """The ``Settings`` field ``name`` that brain-server's arguments ``argv`` give (with the
    environment as it is)."""
    import argparse

    from brain.server.runtime.config import add_server_arguments, settings_from_args

    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    return getattr(settings_from_args(parser.parse_args(list(argv))), name)


def check_off_unless_told_on(monkeypatch: Any, name: str, default: bool = False) -> None:
    """brain-server's on/off switch for the Settings field ``name`` (``--name-with-dashes``,
    ``BRAIN_NAME``): ``default`` (off unless said) when not told, on or off when told by
    flag or variable, the flag winning, anything else refused."""
    flag, env = "--" + name.replace("_", "-"), "BRAIN_" + name.upper()
    monkeypatch.delenv(env, raising=False)
    assert server_setting(name) is default
    assert server_setting(name, flag, "on") is True
    assert server_setting(name, flag, "off") is False
    told, other = ("off", "on") if default else ("on", "off")
    monkeypatch.setenv(env, told)
    assert server_setting(name) is (told == "on")
    assert server_setting(name, flag, other) is (other == "on")
    monkeypatch.setenv(env, "maybe")
    with pytest.raises(SystemExit):
        server_setting(name)
