"""The authenticated caller, as the interceptor hands it to the servicers."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime

from ._permissions import MethodClass
from ._scope import Confinement, RequestScope


class KeyStoreUnavailable(Exception):
    """The key store (the database) cannot be reached; the interceptor answers UNAVAILABLE."""


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A stored API key, without its secret."""

    tenant_id: str
    tenant_name: str
    key_id: str
    principal: str
    permissions: frozenset[str]
    confinement: Confinement
    labels: frozenset[str]
    secret_hash: bytes
    expires_at: datetime | None
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling, with what key, naming which scope, for which method."""

    key: KeyRecord
    method: str
    method_class: MethodClass
    scope: RequestScope
    request_id: str

    @property
    def tenant_id(self) -> str:
        return self.key.tenant_id

    @property
    def principal(self) -> str:
        return self.key.principal

    def has(self, permission: str) -> bool:
        return permission in self.key.permissions


current_caller: ContextVar[Caller | None] = ContextVar("brain_current_caller", default=None)


def caller() -> Caller:
    """The caller of the RPC being served (set by the interceptor)."""
    value = current_caller.get()
    if value is None:
        raise RuntimeError("no authenticated caller in this context")
    return value
