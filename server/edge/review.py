"""ReviewService: propose, list, review and withdraw candidates; list and resolve conflicts,
and propose consolidations."""

from __future__ import annotations

from brain.authz import caller
from brain.authz._grpc_types import Ctx
from brain.server.domain.conflicts.review import ConflictReview
from brain.server.domain.review import Review
from brain.server.edge.status import timeout_ms, unary
from brain.v1 import (
    review_pb2,
    review_pb2_grpc,
)


class ReviewServicer(review_pb2_grpc.ReviewServiceServicer):
    def __init__(self, review: Review) -> None:
        self.review = review
        self.conflicts = ConflictReview(review.memories)

    @unary
    async def ProposeMemory(
        self, request: review_pb2.ProposeMemoryRequest, context: Ctx
    ) -> review_pb2.ProposeMemoryResponse:
        return await self.review.propose(caller(), request, timeout_ms(context))

    @unary
    async def ListCandidates(
        self, request: review_pb2.ListCandidatesRequest, context: Ctx
    ) -> review_pb2.ListCandidatesResponse:
        return await self.review.list_candidates(caller(), request, timeout_ms(context))

    @unary
    async def ReviewCandidate(
        self, request: review_pb2.ReviewCandidateRequest, context: Ctx
    ) -> review_pb2.ReviewCandidateResponse:
        return await self.review.review(caller(), request, timeout_ms(context))

    @unary
    async def WithdrawCandidate(
        self, request: review_pb2.WithdrawCandidateRequest, context: Ctx
    ) -> review_pb2.WithdrawCandidateResponse:
        return await self.review.withdraw(caller(), request, timeout_ms(context))

    @unary
    async def ListConflicts(
        self, request: review_pb2.ListConflictsRequest, context: Ctx
    ) -> review_pb2.ListConflictsResponse:
        return await self.conflicts.list(caller(), request, timeout_ms(context))

    @unary
    async def ResolveConflict(
        self, request: review_pb2.ResolveConflictRequest, context: Ctx
    ) -> review_pb2.ResolveConflictResponse:
        return await self.conflicts.resolve(caller(), request, timeout_ms(context))

    @unary
    async def ConsolidateMemories(
        self, request: review_pb2.ConsolidateMemoriesRequest, context: Ctx
    ) -> review_pb2.ConsolidateMemoriesResponse:
        return await self.conflicts.consolidate(caller(), request, timeout_ms(context))
