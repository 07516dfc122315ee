"""Python clients for Shared Brain: BrainClient (sync), AsyncBrainClient (asyncio), errors.

Names load on first use, so ``python -m brain.clients.codegen`` works even while the
generated ``brain.v1`` modules are being rewritten.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from brain.clients.client import (
        DEFAULT_TIMEOUT,
        AsyncBrainClient,
        BrainClient,
        DraftFields,
        RetryPolicy,
        Scope,
        time_travel,
    )
    from brain.clients.errors import (
        AlreadyExists,
        BrainClientError,
        Conflict,
        DeadlineExceeded,
        FailedPrecondition,
        InvalidArgument,
        NotFound,
        PermissionDenied,
        RateLimited,
        Unauthenticated,
        Unavailable,
        Unimplemented,
    )

__all__ = [
    "DEFAULT_TIMEOUT",
    "AlreadyExists",
    "AsyncBrainClient",
    "BrainClient",
    "BrainClientError",
    "Conflict",
    "DeadlineExceeded",
    "DraftFields",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "RateLimited",
    "RetryPolicy",
    "Scope",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "time_travel",
]
_FROM_CLIENT = frozenset(
    {
        "DEFAULT_TIMEOUT",
        "AsyncBrainClient",
        "BrainClient",
        "DraftFields",
        "RetryPolicy",
        "Scope",
        "time_travel",
    }
)


def __getattr__(name: str) -> Any:
    if name in _FROM_CLIENT:
        return getattr(importlib.import_module(".client", __name__), name)
    if name in __all__:
        return getattr(importlib.import_module(".errors", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
