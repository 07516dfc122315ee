"""Exceptions raised by the Shared Brain clients.

Every failed call raises a subclass of `BrainClientError`, chosen by the gRPC status
code the server answered with; the server's message is kept verbatim::

    BrainClientError                 any other status (INTERNAL, UNKNOWN, CANCELLED, ...)
     ├── NotFound                    NOT_FOUND (also for ids outside the key's scope)
     ├── PermissionDenied            PERMISSION_DENIED
     ├── Unauthenticated             UNAUTHENTICATED
     ├── InvalidArgument             INVALID_ARGUMENT
     ├── FailedPrecondition          FAILED_PRECONDITION (e.g. a tombstone holds the value)
     ├── AlreadyExists               ALREADY_EXISTS (idempotency key reused with another body)
     ├── Conflict                    ABORTED (e.g. expected_version is stale)
     ├── RateLimited                 RESOURCE_EXHAUSTED of the key's rate limit; `retry_after`
     ├── QuotaExceeded               RESOURCE_EXHAUSTED without a retry-after: a quota, a cap
     │                               or a full disk (waiting will not help)
     ├── Unavailable                 UNAVAILABLE (server down or unreachable; retried first)
     ├── DeadlineExceeded            DEADLINE_EXCEEDED
     └── Unimplemented               UNIMPLEMENTED

gRPC errors are translated in exactly one place, `from_rpc_error`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc

__all__ = [
    "AlreadyExists",
    "BrainClientError",
    "Conflict",
    "DeadlineExceeded",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "RateLimited",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "from_rpc_error",
]


class BrainClientError(Exception):
    """A call to the brain failed; `code` is the gRPC status, `message` the server's text."""

    def __init__(
        self, message: str, *, code: grpc.StatusCode = grpc.StatusCode.UNKNOWN, method: str = ""
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.method = method
        # The idempotency key the failed write carried; retry with it to stay safe.
        self.idempotency_key = ""

    @property
    def code_name(self) -> str:
        """The status code's name, e.g. ``NOT_FOUND``."""
        return str(self.code.name)

    def __str__(self) -> str:
        return f"{self.code_name}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code_name}, message={self.message!r})"


class NotFound(BrainClientError):
    """The id does not exist, or the key may not see it (the two are indistinguishable)."""


class PermissionDenied(BrainClientError):
    """The key lacks the permission, or the request's scope leaves the key's confinement."""


class Unauthenticated(BrainClientError):
    """The API key is missing, malformed, unknown, expired or revoked."""


class InvalidArgument(BrainClientError):
    """The request is malformed (empty content, bad mask, out-of-range value, ...)."""


class FailedPrecondition(BrainClientError):
    """The request is well-formed but the brain's state refuses it (e.g. a tombstone)."""


class AlreadyExists(BrainClientError):
    """The idempotency key was used before with a different request body."""


class Conflict(BrainClientError):
    """ABORTED: a concurrent change won (e.g. `expected_version` is no longer current)."""


class RateLimited(BrainClientError):
    """RESOURCE_EXHAUSTED: the key's rate limit is spent; wait `retry_after` seconds."""

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode = grpc.StatusCode.RESOURCE_EXHAUSTED,
        method: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code, method=method)
        self.retry_after = retry_after


class QuotaExceeded(BrainClientError):
    """RESOURCE_EXHAUSTED that waiting does not lift: a tenant quota, a pending cap, a full
    disk (no retry-after). Not a `RateLimited`, so code that backs off and retries on one
    does not retry this forever; the message names the limit and how to raise it."""


class Unavailable(BrainClientError):
    """The server could not be reached (down, restarting, or a network failure)."""


class DeadlineExceeded(BrainClientError):
    """The call did not finish within its deadline."""


class Unimplemented(BrainClientError):
    """The server does not implement this method (yet)."""


_CLASS_OF: dict[grpc.StatusCode, type[BrainClientError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.RESOURCE_EXHAUSTED: RateLimited,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
}


def rpc_status(exc: grpc.RpcError) -> grpc.StatusCode:
    """The status code of a sync or asyncio gRPC error (UNKNOWN if it carries none)."""
    code = getattr(exc, "code", None)
    value = code() if callable(code) else None
    return value if isinstance(value, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def retry_after(exc: grpc.RpcError) -> float | None:
    """Seconds a RESOURCE_EXHAUSTED of the rate limit says to wait (its retry-after-ms
    trailer); None for any other error, a quota's included."""
    if rpc_status(exc) is not grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    trailing = getattr(exc, "trailing_metadata", None)
    return _retry_after_seconds(trailing() if callable(trailing) else None)


def _retry_after_seconds(metadata: Iterable[Any] | None) -> float | None:
    for item in metadata or ():
        key, value = item[0], item[1]
        if key != "retry-after-ms":
            continue
        text = value.decode() if isinstance(value, bytes) else str(value)
        try:
            return max(0.0, int(text) / 1000)
        except ValueError:
            return None
    return None


# gRPC's words for a TLS mistake -> what to do about it (deploy/TLS.md, "When it fails").
_TLS_HINTS = (
    (
        "WRONG_VERSION_NUMBER",
        "the server does not speak TLS on this port: drop the CA (BRAIN_TLS_CA, --tls-ca, "
        "root_certificates) or start brain-server with --tls-cert and --tls-key",
    ),
    (
        "CERTIFICATE_VERIFY_FAILED",
        "the server's certificate is not signed by the CA this client trusts (BRAIN_TLS_CA), "
        "or its file lacks the intermediates",
    ),
    (
        "Hostname Verification Check failed",
        "the name dialled is not in the server's certificate: dial a name it holds",
    ),
    (
        "Socket closed",
        "if the server speaks TLS, give this client its CA (BRAIN_TLS_CA, --tls-ca, "
        "root_certificates); if it asks for client certificates (mTLS), a certificate and "
        "key too (BRAIN_TLS_CERT and BRAIN_TLS_KEY, --tls-cert and --tls-key, "
        "certificate_chain and private_key)",
    ),
)


def _tls_hint(message: str) -> str:
    """A hint for an UNAVAILABLE whose details name a TLS mistake, else nothing."""
    for words, hint in _TLS_HINTS:
        if words in message:
            return f" (hint: {hint})"
    return ""


def from_rpc_error(exc: grpc.RpcError, method: str = "") -> BrainClientError:
    """Translate a sync or asyncio gRPC error into the matching `BrainClientError`."""
    code = rpc_status(exc)
    details = getattr(exc, "details", None)
    message = (details() if callable(details) else None) or str(code.name).lower()
    if code == grpc.StatusCode.UNAVAILABLE:
        message += _tls_hint(message)
    cls = _CLASS_OF.get(code, BrainClientError)
    if cls is RateLimited:
        wait = retry_after(exc)
        if wait is None:
            return QuotaExceeded(message, code=code, method=method)
        return RateLimited(message, code=code, method=method, retry_after=wait)
    return cls(message, code=code, method=method)
