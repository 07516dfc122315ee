"""AuditService: the caller's view of the hash-chained audit log."""

from __future__ import annotations

from brain.authz import caller
from brain.authz._grpc_types import Ctx
from brain.server.domain.audit import AuditLog, event_message
from brain.server.edge.status import timeout_ms, unary
from brain.v1 import (
    audit_pb2,
    audit_pb2_grpc,
)


class AuditServicer(audit_pb2_grpc.AuditServiceServicer):
    def __init__(self, log: AuditLog) -> None:
        self.log = log

    @unary
    async def ListAuditEvents(
        self, request: audit_pb2.ListAuditEventsRequest, context: Ctx
    ) -> audit_pb2.ListAuditEventsResponse:
        who = caller()
        rows, next_token = await self.log.list_events(who, request, timeout_ms(context))
        chain = self.log.sees_chain(who)
        return audit_pb2.ListAuditEventsResponse(
            events=[event_message(r, chain) for r in rows], next_page_token=next_token
        )
