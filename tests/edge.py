"""Helpers for the adversarial edge tests (issue 11): every read path of one key, and the
error signature an invisible id must share with a random one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import grpc

from brain.v1 import common_pb2, memory_pb2

from . import previous_release
from .helpers import Api

RANDOM_ID = "0190f4c6-0000-7000-8000-000000000000"
EVERY_STATUS = [
    common_pb2.MEMORY_STATUS_ACTIVE,
    common_pb2.MEMORY_STATUS_CANDIDATE,
    common_pb2.MEMORY_STATUS_SUPERSEDED,
    common_pb2.MEMORY_STATUS_RETRACTED,
    common_pb2.MEMORY_STATUS_REJECTED,
    common_pb2.MEMORY_STATUS_WITHDRAWN,
]


async def outcome(call: Awaitable[Any]) -> tuple[Any, ...]:
    """(OK, response) or the error as the caller sees it: code, details, trailers."""
    try:
        return (grpc.StatusCode.OK, await call)
    except grpc.aio.AioRpcError as err:
        return (err.code(), err.details(), tuple(err.trailing_metadata() or ()))


def get_call(api: Api, memory_id: str, **time: Any) -> Awaitable[Any]:
    return api.memories.GetMemory(
        memory_pb2.GetMemoryRequest(
            scope=api.scope(), id=memory_id, time=common_pb2.TimeTravel(**time)
        ),
        metadata=api.md,
    )


def history_call(api: Api, memory_id: str) -> Awaitable[Any]:
    return api.memories.GetMemoryHistory(
        memory_pb2.GetMemoryHistoryRequest(scope=api.scope(), id=memory_id), metadata=api.md
    )


async def hidden_like_random(api: Api, memory_id: str, **time: Any) -> bool:
    """Get (at ``time``) and History of ``memory_id`` fail exactly as for a random id."""
    for call, baseline in (
        (get_call(api, memory_id, **time), get_call(api, RANDOM_ID, **time)),
        (history_call(api, memory_id), history_call(api, RANDOM_ID)),
    ):
        seen, expected = await outcome(call), await outcome(baseline)
        if expected[0] != grpc.StatusCode.NOT_FOUND or seen != expected:
            return False
    return True


@dataclass
class Seen:
    """What one key's collection reads return: memory ids, and (id, version) for export."""

    search: set[str]
    listed: set[str]
    exported: set[tuple[str, int]]
    context: set[str]
    watched: set[tuple[str, int]]

    @property
    def exported_ids(self) -> set[str]:
        return {i for i, _ in self.exported}

    @property
    def watched_ids(self) -> set[str]:
        return {i for i, _ in self.watched}


async def collection_reads(
    api: Api,
    query: str,
    *,
    sentinel: str,
    start: str,
    statuses: list[int] | None = None,
    time: common_pb2.TimeTravel | None = None,
) -> Seen:
    """Search, List, Export (with history), BuildContext and a Watch replayed from the
    tenant's first event (the cursor ``start``, see ``first_event``) up to ``sentinel`` (a
    memory this key sees, written last)."""
    f = common_pb2.MemoryFilter(statuses=statuses or [])
    t = time or common_pb2.TimeTravel()
    search = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(
            scope=api.scope(), query=query, limit=100, filter=f, time=t
        ),
        metadata=api.md,
    )
    listed = await api.list_all(page_size=100, filter=f, time=t)
    exported = await api.export(include_history=True)
    context = await api.memories.BuildContext(
        memory_pb2.BuildContextRequest(
            scope=api.scope(), query=query, filter=f, time=t, token_budget=32_000,
            max_memories=100,
        ),
        metadata=api.md,
    )  # fmt: skip
    return Seen(
        search={h.memory.id for h in search.hits},
        listed={m.id for m in listed},
        exported={(e.memory.id, e.memory.version) for e in exported},
        context={i.id for i in context.items},
        watched=await watch_replay(api, sentinel, start),
    )


def first_event(pepper: bytes) -> str:
    """The Watch cursor before a tenant's first event, in the previous release's unbound
    format, so every key of the tenant may present it (a test knows the pepper; a client
    starts from a cursor the server gave it, bound to its principal)."""
    return previous_release.sealed_cursor(pepper, 0)


async def watch_replay(
    api: Api, sentinel: str, start: str, within: float = 15.0
) -> set[tuple[str, int]]:
    """(id, version) of every change a watch from ``start`` delivers, up to ``sentinel``."""
    call = api.memories.WatchMemories(
        memory_pb2.WatchMemoriesRequest(scope=api.scope(), cursor=start), metadata=api.md
    )
    seen: set[tuple[str, int]] = set()

    async def pump() -> None:
        async for item in call:
            if not item.HasField("memory"):
                continue  # the position marker
            seen.add((item.memory.id, item.memory.version))
            if item.memory.id == sentinel:
                return

    try:
        await asyncio.wait_for(pump(), within)
    finally:
        call.cancel()
    return seen
