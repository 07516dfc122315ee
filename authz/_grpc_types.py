"""Type aliases for grpc generics (grpc-stubs makes them generic; the runtime does not)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

if TYPE_CHECKING:
    Ctx: TypeAlias = grpc.aio.ServicerContext[Any, Any]
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]
    Interceptor: TypeAlias = grpc.aio.ServerInterceptor[Any, Any]
else:
    Ctx = grpc.aio.ServicerContext
    Handler = grpc.RpcMethodHandler
    Interceptor = grpc.aio.ServerInterceptor
