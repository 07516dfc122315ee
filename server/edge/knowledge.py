"""KnowledgeService: thin translation between brain.v1 messages and the knowledge domain."""

from __future__ import annotations

from brain.authz import caller
from brain.authz._grpc_types import Ctx
from brain.server.domain.knowledge import Knowledge
from brain.server.domain.knowledge.search import hit_message
from brain.server.edge.status import status_code, timeout_ms, unary
from brain.server.errors import BrainError
from brain.v1 import knowledge_pb2, knowledge_pb2_grpc


class KnowledgeServicer(knowledge_pb2_grpc.KnowledgeServiceServicer):
    def __init__(self, knowledge: Knowledge) -> None:
        self.knowledge = knowledge

    @unary
    async def PutDocument(
        self, request: knowledge_pb2.PutDocumentRequest, context: Ctx
    ) -> knowledge_pb2.PutDocumentResponse:
        return await self.knowledge.put(caller(), request, timeout_ms(context))

    @unary
    async def PutDocuments(
        self, request: knowledge_pb2.PutDocumentsRequest, context: Ctx
    ) -> knowledge_pb2.PutDocumentsResponse:
        results = await self.knowledge.put_many(caller(), request, timeout_ms(context))
        return knowledge_pb2.PutDocumentsResponse(results=[_result(r) for r in results])

    @unary
    async def GetDocument(
        self, request: knowledge_pb2.GetDocumentRequest, context: Ctx
    ) -> knowledge_pb2.GetDocumentResponse:
        return await self.knowledge.get(caller(), request, timeout_ms(context))

    @unary
    async def ListDocuments(
        self, request: knowledge_pb2.ListDocumentsRequest, context: Ctx
    ) -> knowledge_pb2.ListDocumentsResponse:
        return await self.knowledge.list_page(caller(), request, timeout_ms(context))

    @unary
    async def DeleteDocument(
        self, request: knowledge_pb2.DeleteDocumentRequest, context: Ctx
    ) -> knowledge_pb2.DeleteDocumentResponse:
        return await self.knowledge.delete(caller(), request, timeout_ms(context))

    @unary
    async def SearchKnowledge(
        self, request: knowledge_pb2.SearchKnowledgeRequest, context: Ctx
    ) -> knowledge_pb2.SearchKnowledgeResponse:
        found = await self.knowledge.search(caller(), request, timeout_ms(context))
        return knowledge_pb2.SearchKnowledgeResponse(
            hits=[hit_message(h) for h in found.hits],
            lanes=found.lanes,  # type: ignore[arg-type]
            below_floor=found.below_floor,
            ranking=found.ranking,  # type: ignore[arg-type]
        )


def _result(
    outcome: knowledge_pb2.PutDocumentResponse | BrainError,
) -> knowledge_pb2.PutDocumentsResult:
    """One document of PutDocuments: its put, or the status PutDocument would have had."""
    if isinstance(outcome, BrainError):
        return knowledge_pb2.PutDocumentsResult(
            error_code=status_code(outcome).name, error_message=outcome.message
        )
    return knowledge_pb2.PutDocumentsResult(put=outcome)
