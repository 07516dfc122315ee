"""MemoryService: thin translation between brain.v1 messages and the memory domain."""

from __future__ import annotations

from collections.abc import AsyncIterator

from brain.authz import caller
from brain.authz._grpc_types import Ctx
from brain.v1 import memory_pb2, memory_pb2_grpc

from .. import convert
from ..memories import Memories
from ._status import not_yet, streaming, timeout_ms, unary


class MemoryServicer(memory_pb2_grpc.MemoryServiceServicer):
    def __init__(self, memories: Memories) -> None:
        self.memories = memories

    @unary
    async def SaveMemory(
        self, request: memory_pb2.SaveMemoryRequest, context: Ctx
    ) -> memory_pb2.SaveMemoryResponse:
        row, outcome = await self.memories.save(caller(), request, timeout_ms(context))
        return memory_pb2.SaveMemoryResponse(memory=convert.memory(row), outcome=outcome)  # type: ignore[arg-type]

    @unary
    async def GetMemory(
        self, request: memory_pb2.GetMemoryRequest, context: Ctx
    ) -> memory_pb2.GetMemoryResponse:
        row = await self.memories.get(caller(), request, timeout_ms(context))
        return memory_pb2.GetMemoryResponse(memory=convert.memory(row))

    @unary
    async def SearchMemories(
        self, request: memory_pb2.SearchMemoriesRequest, context: Ctx
    ) -> memory_pb2.SearchMemoriesResponse:
        hits = await self.memories.search(caller(), request, timeout_ms(context))
        return memory_pb2.SearchMemoriesResponse(
            hits=[
                memory_pb2.SearchHit(
                    memory=convert.memory(h.row),
                    score=h.score,
                    lexical_rank=h.lexical_rank,
                    semantic_rank=h.semantic_rank,
                    lexical_score=h.lexical_score,
                    semantic_similarity=h.semantic_similarity,
                )
                for h in hits
            ]
        )

    @unary
    async def UpdateMemory(
        self, request: memory_pb2.UpdateMemoryRequest, context: Ctx
    ) -> memory_pb2.UpdateMemoryResponse:
        raise not_yet("UpdateMemory", 4)

    @unary
    async def ForgetMemory(
        self, request: memory_pb2.ForgetMemoryRequest, context: Ctx
    ) -> memory_pb2.ForgetMemoryResponse:
        raise not_yet("ForgetMemory", 4)

    @unary
    async def ListMemories(
        self, request: memory_pb2.ListMemoriesRequest, context: Ctx
    ) -> memory_pb2.ListMemoriesResponse:
        raise not_yet("ListMemories", 4)

    @unary
    async def GetMemoryHistory(
        self, request: memory_pb2.GetMemoryHistoryRequest, context: Ctx
    ) -> memory_pb2.GetMemoryHistoryResponse:
        raise not_yet("GetMemoryHistory", 4)

    @streaming
    async def ExportMemories(
        self, request: memory_pb2.ExportMemoriesRequest, context: Ctx
    ) -> AsyncIterator[memory_pb2.ExportMemoriesResponse]:
        raise not_yet("ExportMemories", 4)
        yield  # pragma: no cover

    @streaming
    async def WatchMemories(
        self, request: memory_pb2.WatchMemoriesRequest, context: Ctx
    ) -> AsyncIterator[memory_pb2.WatchMemoriesResponse]:
        raise not_yet("WatchMemories", 5)
        yield  # pragma: no cover

    @unary
    async def BuildContext(
        self, request: memory_pb2.BuildContextRequest, context: Ctx
    ) -> memory_pb2.BuildContextResponse:
        raise not_yet("BuildContext", 6)
