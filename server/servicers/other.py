"""ReviewService, AuditService and IdentityService."""

from __future__ import annotations

from brain.authz import allowed_methods, caller
from brain.authz._grpc_types import Ctx
from brain.v1 import (
    audit_pb2,
    audit_pb2_grpc,
    identity_pb2,
    identity_pb2_grpc,
    review_pb2,
    review_pb2_grpc,
)

from .. import convert
from ..audit import AuditLog, event_message
from ..review import Review
from ._status import timeout_ms, unary


class IdentityServicer(identity_pb2_grpc.IdentityServiceServicer):
    @unary
    async def WhoAmI(
        self, request: identity_pb2.WhoAmIRequest, context: Ctx
    ) -> identity_pb2.WhoAmIResponse:
        key = caller().key
        c = key.confinement
        response = identity_pb2.WhoAmIResponse(
            tenant_id=key.tenant_id,
            tenant_name=key.tenant_name,
            key_id=key.key_id,
            principal=key.principal,
            permissions=sorted(key.permissions),
            confinement=identity_pb2.Confinement(
                user_id=c.user_id or "",
                namespaces=sorted(c.namespaces),
                session_id=c.session_id or "",
            ),
            labels=sorted(key.labels),
            allowed_methods=allowed_methods(key.permissions),
        )
        expires = convert.ts(key.expires_at)
        if expires is not None:
            response.expires_at.CopyFrom(expires)
        return response


class ReviewServicer(review_pb2_grpc.ReviewServiceServicer):
    def __init__(self, review: Review) -> None:
        self.review = review

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


class AuditServicer(audit_pb2_grpc.AuditServiceServicer):
    def __init__(self, log: AuditLog) -> None:
        self.log = log

    @unary
    async def ListAuditEvents(
        self, request: audit_pb2.ListAuditEventsRequest, context: Ctx
    ) -> audit_pb2.ListAuditEventsResponse:
        rows, next_token = await self.log.list_events(caller(), request, timeout_ms(context))
        return audit_pb2.ListAuditEventsResponse(
            events=[event_message(r) for r in rows], next_page_token=next_token
        )
