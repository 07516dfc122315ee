"""Python clients for Shared Brain: `BrainClient` (sync), `AsyncBrainClient` (asyncio), errors.

    from brain.clients import BrainClient, Scope

    scope = Scope(user_id="alice", namespace="app")
    with BrainClient("127.0.0.1:50051", api_key, scope=scope) as c:
        saved = c.save("Alice prefers tabs", kind="preference", tags=["style"])
        for hit in c.search("tabs or spaces?").hits:
            print(hit.memory.id, hit.score, hit.memory.content)

Conventions shared by `BrainClient` and `AsyncBrainClient`:

- **Scope** is set once at construction and stamped on every request's `scope` field.
- **Results** are the generated protobuf messages: unary methods return the RPC's response
  message (`save` -> `SaveMemoryResponse`, `get` -> `GetMemoryResponse`, ...). Paginated RPCs
  (`list`, `list_candidates`, `list_audit_events`) return an iterator over the items of every
  page; `export` and `watch` return an iterator over the streamed response messages.
- **Deadlines**: unary calls get `timeout` seconds (default: the client's `timeout`, 10 s),
  spent across all retries. Streams have no deadline unless `timeout` is given.
- **Retries**: `UNAVAILABLE`, `DEADLINE_EXCEEDED` and a shutting-down server's `CANCELLED`,
  only for idempotent calls — reads, forget (forgetting twice is a no-op), and writes that carry
  an `idempotency_key` — with exponential backoff and jitter (`RetryPolicy`). Export and watch
  resume from the last cursor they delivered.
- **Restarts**: for `restart_window` seconds (default 15) after a working connection is lost,
  a call waits for the server to come back, within its deadline, before sending anything;
  outside that window a server that cannot be reached fails a call within a second. The exact
  rule is in `brain.clients._base`.
- **Idempotency keys**: save, update and propose attach a fresh key per call unless you pass
  one (or `idempotency_key=""` to send none), and every retry of that call reuses it, so a
  write that committed but answered late is replayed, never stored twice. A failed write's
  error carries the key in `idempotency_key`: pass it back to retry the same write yourself.
- **Errors** raise a `brain.clients.errors.BrainClientError` subclass chosen by status code, with
  the server's message.

The package is the one public face: `_requests` builds every request message once for both
clients, `_base` holds what they share (TLS, retries, deadlines), `_sync` and `_async` the two
clients. Names load on first use, so ``python -m brain.clients.codegen`` works even while the
generated ``brain.v1`` modules are being rewritten.

Importing the package before gRPC sets ``GRPC_VERBOSITY`` to ``ERROR`` unless it is set:
gRPC's C core otherwise writes its own notes (each failed TLS handshake, twice) to the
stderr of `brain`, `brain-mcp` and the hooks, ahead of the one line that says what failed.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

if TYPE_CHECKING:
    from brain.clients._async import AsyncBrainClient
    from brain.clients._base import DEFAULT_TIMEOUT, RetryPolicy
    from brain.clients._requests import DraftFields, Scope, graph_draft, time_travel
    from brain.clients._sync import BrainClient
    from brain.clients.errors import (
        AlreadyExists,
        BrainClientError,
        Conflict,
        DeadlineExceeded,
        FailedPrecondition,
        InvalidArgument,
        NotFound,
        PermissionDenied,
        QuotaExceeded,
        RateLimited,
        Unauthenticated,
        Unavailable,
        Unimplemented,
    )
    from brain.v1.knowledge_pb2 import PutDocumentsItem

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
    "PutDocumentsItem",
    "QuotaExceeded",
    "RateLimited",
    "RetryPolicy",
    "Scope",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "graph_draft",
    "time_travel",
]
_HOME = {
    "DEFAULT_TIMEOUT": "._base",
    "RetryPolicy": "._base",
    "AsyncBrainClient": "._async",
    "BrainClient": "._sync",
    "DraftFields": "._requests",
    "Scope": "._requests",
    "graph_draft": "._requests",
    "time_travel": "._requests",
    "PutDocumentsItem": "brain.v1.knowledge_pb2",  # one document of put_documents
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name], __name__), name)
    if name in __all__:
        return getattr(importlib.import_module(".errors", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
