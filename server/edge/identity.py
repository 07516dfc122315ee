"""IdentityService: who the caller's key says it is."""

from __future__ import annotations

from brain.authz import allowed_methods, caller
from brain.authz._grpc_types import Ctx
from brain.server.domain import convert
from brain.server.domain import validation as check
from brain.server.edge.status import unary
from brain.v1 import (
    identity_pb2,
    identity_pb2_grpc,
)


class IdentityServicer(identity_pb2_grpc.IdentityServiceServicer):
    @unary
    async def WhoAmI(
        self, request: identity_pb2.WhoAmIRequest, context: Ctx
    ) -> identity_pb2.WhoAmIResponse:
        # The scope a client means to use, if it names one, must be well-formed: brain-mcp
        # and `brain` check theirs here at start, before the first call would refuse it.
        check.name("scope.namespace", request.scope.namespace)
        check.name("scope.user_id", request.scope.user_id)
        check.name("scope.session_id", request.scope.session_id)
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
