"""MemoryService: thin translation between brain.v1 messages and the memory domain."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from brain.authz import caller
from brain.authz._grpc_types import Ctx
from brain.server.domain import convert, cursors, watch
from brain.server.domain.knowledge.documents import document_message
from brain.server.domain.memories import Memories
from brain.server.edge.status import streaming, timeout_ms, unary
from brain.v1 import memory_pb2, memory_pb2_grpc


class MemoryServicer(memory_pb2_grpc.MemoryServiceServicer):
    def __init__(self, memories: Memories) -> None:
        self.memories = memories

    @unary
    async def SaveMemory(
        self, request: memory_pb2.SaveMemoryRequest, context: Ctx
    ) -> memory_pb2.SaveMemoryResponse:
        return await self.memories.save(caller(), request, timeout_ms(context))

    @unary
    async def GetMemory(
        self, request: memory_pb2.GetMemoryRequest, context: Ctx
    ) -> memory_pb2.GetMemoryResponse:
        return await self.memories.get(caller(), request, timeout_ms(context))

    @unary
    async def SearchMemories(
        self, request: memory_pb2.SearchMemoriesRequest, context: Ctx
    ) -> memory_pb2.SearchMemoriesResponse:
        found = await self.memories.search(caller(), request, timeout_ms(context))
        return memory_pb2.SearchMemoriesResponse(
            ranking=found.ranking,  # type: ignore[arg-type]
            below_floor=found.below_floor,
            hits=[
                memory_pb2.SearchHit(
                    memory=convert.memory(h.row),
                    score=h.score,
                    lexical_rank=h.lexical_rank,
                    semantic_rank=h.semantic_rank,
                    lexical_score=h.lexical_score,
                    semantic_similarity=h.semantic_similarity,
                    rerank_score=h.rerank_score,
                    exact_rank=h.exact_rank,
                    exact_score=h.exact_score,
                    relevance=h.relevance,
                    conflicts=found.conflicts.get(h.row["memory_id"], ()),
                )
                for h in found.hits
            ],
        )

    @unary
    async def UpdateMemory(
        self, request: memory_pb2.UpdateMemoryRequest, context: Ctx
    ) -> memory_pb2.UpdateMemoryResponse:
        return await self.memories.update(caller(), request, timeout_ms(context))

    @unary
    async def ForgetMemory(
        self, request: memory_pb2.ForgetMemoryRequest, context: Ctx
    ) -> memory_pb2.ForgetMemoryResponse:
        return await self.memories.forget(caller(), request, timeout_ms(context))

    @unary
    async def ListMemories(
        self, request: memory_pb2.ListMemoriesRequest, context: Ctx
    ) -> memory_pb2.ListMemoriesResponse:
        return await self.memories.list_page(caller(), request, timeout_ms(context))

    @unary
    async def GetMemoryHistory(
        self, request: memory_pb2.GetMemoryHistoryRequest, context: Ctx
    ) -> memory_pb2.GetMemoryHistoryResponse:
        return await self.memories.history(caller(), request, timeout_ms(context))

    @streaming
    async def ExportMemories(
        self, request: memory_pb2.ExportMemoriesRequest, context: Ctx
    ) -> AsyncIterator[memory_pb2.ExportMemoriesResponse]:
        async for item in self.memories.export(caller(), request):
            yield item

    @streaming
    async def WatchMemories(
        self, request: memory_pb2.WatchMemoriesRequest, context: Ctx
    ) -> AsyncIterator[memory_pb2.WatchMemoriesResponse]:
        who = caller()
        feed = watch.changes(self.memories, who, request)
        async with contextlib.aclosing(feed) as changes:
            async for change in changes:
                response = memory_pb2.WatchMemoriesResponse(
                    kind=change.kind,  # type: ignore[arg-type]
                    cursor=self.memories.tokens.encode_seq(
                        who, change.seq, kind=cursors.Kind.WATCH
                    ),
                )
                if change.row is not None and change.document:
                    response.document.CopyFrom(document_message(change.row))
                elif change.row is not None:
                    response.memory.CopyFrom(convert.memory(change.row))
                if change.changed_at is not None:
                    response.changed_at.FromDatetime(change.changed_at)
                yield response

    @unary
    async def BuildContext(
        self, request: memory_pb2.BuildContextRequest, context: Ctx
    ) -> memory_pb2.BuildContextResponse:
        return await self.memories.build_context(caller(), request, timeout_ms(context))
