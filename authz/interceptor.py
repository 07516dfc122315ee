"""The authorization interceptor: authenticate, classify, confine, then serve.

It wraps each method handler so it sees the deserialized request. In order:
1. the method must be in METHOD_CLASSES (unknown methods are refused for any key);
2. the ``authorization: Bearer brk_…`` key must parse, exist, match, be unexpired
   and unrevoked — every failure is the same UNAUTHENTICATED; a key store that cannot
   be reached is UNAVAILABLE (retryable);
3. the request body must parse, and pass the generic ``check_request`` (NUL bytes,
   out-of-range timestamps in any field): otherwise INVALID_ARGUMENT naming the field;
4. the key must hold the permission the method's class needs (PERMISSION_DENIED);
5. the request's scope (and nested filter copies) must stay inside the key's
   confinement (PERMISSION_DENIED naming the field);
6. the per-key rate limit (RESOURCE_EXHAUSTED with a retry delay).
Then the caller is bound in a ContextVar for the servicer. Every call is logged with its
method and status (failures caused by the server or its database at warning level), and
handed to an optional ``CallObserver`` (metrics and traces; with a trace, the trace id is
the call's request id).
It holds no business logic; row visibility is enforced in SQL by the storage layer.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import Token
from datetime import UTC, datetime
from typing import Any, Protocol, cast

import grpc
import structlog

from ._grpc_types import Ctx, Handler, Interceptor
from ._keys import MalformedKey, parse_key, verify_secret
from ._messages import bounded
from ._permissions import METHOD_CLASSES, REQUIRED_PERMISSION, MethodClass
from ._principal import Caller, KeyRecord, KeyStoreUnavailable, current_caller
from ._ratelimit import Limiter
from ._scope import NestedScope, RequestScope, ScopeViolation, check_scope

UNAUTHENTICATED_MESSAGE = "missing, malformed, unknown, expired or revoked API key"
UNAVAILABLE_MESSAGE = "the key store (database) is unavailable; retry shortly"
STUCK_MESSAGE = "the database did not answer in time; retry shortly"
_log = structlog.get_logger("brain.rpc")
# Statuses that mean the server (or its database) failed, not the caller.
SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


class Undecodable:
    """What the lenient deserializer hands on for a body that does not parse."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


def lenient(deserializer: Callable[[bytes], Any] | None, type_name: str) -> Callable[[bytes], Any]:
    """A request deserializer that never raises: a bad body becomes ``Undecodable``, which
    the wrapper answers INVALID_ARGUMENT (grpc would answer UNKNOWN naming the parser)."""

    def deserialize(data: bytes) -> Any:
        if deserializer is None:
            return data
        try:
            return deserializer(data)
        except Exception:  # DecodeError, RecursionError on absurd nesting, bad UTF-8
            return Undecodable(type_name)

    return deserialize


class KeyResolver(Protocol):
    """Looks a key up by its public id; None when there is no such key."""

    async def __call__(self, key_id: str) -> KeyRecord | None: ...


class CallObserver(Protocol):
    """Sees every brain.v1 call the interceptor admits or refuses (metrics, traces)."""

    def call_span(self, method: str) -> AbstractContextManager[str | None]:
        """Wraps the whole call; yields a trace id to use as the request id, or None."""
        ...

    def call_done(
        self, method: str, code: grpc.StatusCode, seconds: float, server_fault: bool
    ) -> None: ...

    def rate_limited(self, key_id: str) -> None: ...


class _Denied(Exception):
    def __init__(self, code: grpc.StatusCode, message: str, trailers: tuple[Any, ...] = ()) -> None:
        message = bounded(message)
        super().__init__(message)
        self.code = code
        self.message = message
        self.trailers = trailers


def _bearer(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == "authorization":
            text = value.decode() if isinstance(value, bytes) else str(value)
            scheme, _, token = text.partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


PUT_DOCUMENTS = "/brain.v1.KnowledgeService/PutDocuments"
# The most documents one PutDocuments call may carry (the server's MAX_PUT_DOCUMENTS): a
# call over it costs one token, so its caller learns of the mistake, not of the limiter.
PUT_DOCUMENTS_MAX = 100


def call_cost(method: str, request: Any) -> float:
    """Tokens of the rate limit a call takes: one, or one per document of a PutDocuments
    (a batch is as much work as that many PutDocument calls, and no cheaper to guess with;
    the limiter takes at most its burst, so any call can pass once the bucket is full)."""
    if method == PUT_DOCUMENTS and len(request.documents) <= PUT_DOCUMENTS_MAX:
        return float(max(len(request.documents), 1))
    return 1.0  # (a call over the cap is refused INVALID_ARGUMENT, never throttled for it)


def request_scope(request: Any) -> tuple[RequestScope, NestedScope | None]:
    """Read scope and nested filter copies off any brain.v1 request message."""
    s = request.scope
    scope = RequestScope(user_id=s.user_id, namespace=s.namespace, session_id=s.session_id)
    nested = None
    if "filter" in type(request).DESCRIPTOR.fields_by_name:
        f = request.filter
        nested = NestedScope(
            user_id=f.user_id, namespaces=tuple(f.namespaces), session_id=f.session_id
        )
    return scope, nested


class AuthorizationInterceptor(Interceptor):
    """Authenticates and confines every brain.v1 call; see the module docstring."""

    def __init__(
        self,
        resolve_key: KeyResolver,
        pepper: bytes,
        rate_limiter: Limiter | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        passthrough_prefixes: tuple[str, ...] = ("/grpc.health.v1.", "/grpc.reflection."),
        touch_key: Callable[[str], Awaitable[None]] | None = None,
        touch_every_seconds: float = 60.0,
        check_request: Callable[[Any], str | None] | None = None,
        observer: CallObserver | None = None,
        max_call_seconds: float | None = None,
    ) -> None:
        self._resolve_key = resolve_key
        self._pepper = pepper
        self._rate_limiter = rate_limiter
        self._clock = clock
        self._passthrough = passthrough_prefixes
        self._touch_key = touch_key
        self._touch_every = touch_every_seconds
        self._touched: dict[str, float] = {}
        self._check_request = check_request
        self._observer = observer
        # A unary call whose client set no deadline is answered UNAVAILABLE after this long
        # (a frozen database enforces no statement timeout; the call must not wait forever).
        self._max_call_seconds = max_call_seconds
        # Set by the server as it stops: a call it then ends UNAVAILABLE (a Watch stream told
        # to reconnect) is the drain working, logged at info and not counted as a fault.
        self.draining = False

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        details: grpc.HandlerCallDetails,
    ) -> Handler:
        method: str = details.method
        if method.startswith(self._passthrough):
            return await continuation(details)
        handler = await continuation(details)
        method_class = METHOD_CLASSES.get(method)
        if handler is None or method_class is None:
            return _refusing_handler(method)
        deserialize = lenient(handler.request_deserializer, method.rsplit("/", 1)[-1])
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(handler.unary_unary, method, method_class),
                request_deserializer=deserialize,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(
                    cast(Callable[..., AsyncIterator[Any]], handler.unary_stream),
                    method,
                    method_class,
                ),
                request_deserializer=deserialize,
                response_serializer=handler.response_serializer,
            )
        return _refusing_handler(method)

    async def _authorize(
        self, request: Any, context: Ctx, method: str, cls: MethodClass, request_id: str | None
    ) -> Caller:
        token = _bearer(context.invocation_metadata())
        key = await self._authenticate(token)
        self._check_body(request, method)
        needed = REQUIRED_PERMISSION[cls]
        if needed is not None and needed.value not in key.permissions:
            raise _Denied(
                grpc.StatusCode.PERMISSION_DENIED,
                f"this key lacks the {needed.value} permission needed for {method}",
            )
        scope, nested = request_scope(request)
        try:
            check_scope(key.confinement, scope, nested, required=cls is not MethodClass.ROWLESS)
        except ScopeViolation as exc:
            code = (
                grpc.StatusCode.INVALID_ARGUMENT
                if exc.malformed
                else grpc.StatusCode.PERMISSION_DENIED
            )
            raise _Denied(code, exc.message) from exc
        if self._rate_limiter is not None:
            wait = self._rate_limiter.acquire(key.key_id, call_cost(method, request))
            if wait > 0:
                if self._observer is not None:
                    self._observer.rate_limited(key.key_id)
                ms = int(wait * 1000) + 1  # the trailer's value, and the message's
                raise _Denied(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"rate limit exceeded for this key; retry after {ms} ms",
                    (("retry-after-ms", str(ms)),),
                )
        return Caller(
            key=key,
            method=method,
            method_class=cls,
            scope=scope,
            request_id=request_id or uuid.uuid4().hex,
        )

    def _check_body(self, request: Any, method: str) -> None:
        if isinstance(request, Undecodable):
            raise _Denied(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request: the body is not a valid request message for {request.type_name}",
            )
        problem = self._check_request(request) if self._check_request is not None else None
        if problem is not None:
            raise _Denied(grpc.StatusCode.INVALID_ARGUMENT, problem)

    async def _authenticate(self, token: str | None) -> KeyRecord:
        denied = _Denied(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
        if not token:
            raise denied
        try:
            parsed = parse_key(token)
        except MalformedKey:
            raise denied from None
        try:
            key = await self._resolve_key(parsed.key_id)
        except KeyStoreUnavailable as exc:
            raise _Denied(grpc.StatusCode.UNAVAILABLE, UNAVAILABLE_MESSAGE) from exc
        if key is None or not verify_secret(
            self._pepper, parsed.key_id, parsed.secret, key.secret_hash
        ):
            raise denied
        now = self._clock()
        if key.revoked_at is not None and key.revoked_at <= now:
            raise denied
        if key.expires_at is not None and key.expires_at <= now:
            raise denied
        await self._note_use(key.key_id)
        return key

    async def _note_use(self, key_id: str) -> None:
        """Record a coarse last-used time, at most once a minute per key and process."""
        if self._touch_key is None:
            return
        now = time.monotonic()
        if now - self._touched.get(key_id, -self._touch_every) < self._touch_every:
            return
        self._touched[key_id] = now
        try:
            await self._touch_key(key_id)
        except KeyStoreUnavailable as exc:
            raise _Denied(grpc.StatusCode.UNAVAILABLE, UNAVAILABLE_MESSAGE) from exc

    def _span(self, method: str) -> AbstractContextManager[str | None]:
        return nullcontext() if self._observer is None else self._observer.call_span(method)

    def _done(
        self, method: str, caller: Caller | None, code: grpc.StatusCode, started: float
    ) -> None:
        fault = code in SERVER_FAULTS and not (
            self.draining and code is grpc.StatusCode.UNAVAILABLE
        )
        _log_call(method, caller, code, started, fault)
        if self._observer is not None:
            seconds = time.perf_counter() - started
            self._observer.call_done(method, code, seconds, fault)

    async def _admit(
        self,
        request: Any,
        context: Ctx,
        method: str,
        cls: MethodClass,
        started: float,
        request_id: str | None,
    ) -> Caller:
        """The authorised caller, or the call ends here with the refusal (and is logged)."""
        try:
            return await self._authorize(request, context, method, cls, request_id)
        except _Denied as denied:
            self._done(method, None, denied.code, started)
            if denied.trailers:
                context.set_trailing_metadata(denied.trailers)
            await context.abort(denied.code, denied.message)
            raise AssertionError("unreachable: abort raises") from denied
        except Exception as exc:  # a bug: log it whole, tell the caller nothing internal
            _log.error("authorization failed unexpectedly", method=method, exc_info=exc)
            self._done(method, None, grpc.StatusCode.INTERNAL, started)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error; see server logs")
            raise AssertionError("unreachable: abort raises") from exc

    def _wrap_unary(
        self, behavior: Callable[..., Awaitable[Any]], method: str, cls: MethodClass
    ) -> Callable[..., Awaitable[Any]]:
        async def wrapper(request: Any, context: Ctx) -> Any:
            with self._span(method) as trace_id:
                started = time.perf_counter()
                caller = await self._admit(request, context, method, cls, started, trace_id)
                bound = _bind(caller)
                code = grpc.StatusCode.UNKNOWN
                try:
                    response = await behavior(request, context)
                    code = _code_of(context)
                    return response
                except asyncio.CancelledError:  # the client cancelled, or its deadline passed
                    code = _code_of(context, _ended_by_client(context))
                    raise
                except BaseException:
                    code = _code_of(context, grpc.StatusCode.UNKNOWN)
                    raise
                finally:
                    _unbind(bound)
                    self._done(method, caller, code, started)

        limit = self._max_call_seconds
        if limit is None:
            return wrapper

        async def capped(request: Any, context: Ctx) -> Any:
            if context.time_remaining() is not None:
                return await wrapper(request, context)  # the client's deadline governs
            call = asyncio.ensure_future(wrapper(request, context))
            try:
                done, _ = await asyncio.wait({call}, timeout=limit)
            except asyncio.CancelledError:
                call.cancel()
                raise
            if call in done:
                return call.result()
            # Stuck on a database that neither answers nor fails: answer now, and let the
            # abandoned call unwind in the background whenever the database comes back.
            call.add_done_callback(_abandoned)
            call.cancel()
            _log.warning("rpc abandoned", method=method, after_seconds=limit)
            await context.abort(grpc.StatusCode.UNAVAILABLE, STUCK_MESSAGE)
            raise AssertionError("unreachable: abort raises")

        return capped

    def _wrap_stream(
        self, behavior: Callable[..., AsyncIterator[Any]], method: str, cls: MethodClass
    ) -> Callable[..., AsyncIterator[Any]]:
        async def wrapper(request: Any, context: Ctx) -> AsyncIterator[Any]:
            with self._span(method) as trace_id:
                started = time.perf_counter()
                caller = await self._admit(request, context, method, cls, started, trace_id)
                bound = _bind(caller)
                code = grpc.StatusCode.UNKNOWN
                try:
                    async for item in behavior(request, context):
                        yield item
                    code = _code_of(context)
                except BaseException:
                    code = _code_of(context, _ended_by_client(context))
                    raise
                finally:
                    _unbind(bound)
                    self._done(method, caller, code, started)

        return wrapper


def _abandoned(call: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned call's outcome so it is not reported as never retrieved."""
    if not call.cancelled():
        call.exception()


def _bind(caller: Caller) -> tuple[Token[Caller | None], Mapping[str, Token[Any]]]:
    """Make ``caller`` the current caller, for servicers and for every log line of the call."""
    return current_caller.set(caller), structlog.contextvars.bind_contextvars(
        request_id=caller.request_id,
        tenant_id=caller.tenant_id,
        key_id=caller.key.key_id,
        method=caller.method,
    )


def _unbind(bound: tuple[Token[Caller | None], Mapping[str, Token[Any]]]) -> None:
    try:
        current_caller.reset(bound[0])
        structlog.contextvars.reset_contextvars(**bound[1])
    except ValueError:
        # A stream the client cancelled is closed from another context (its generator is
        # finalised elsewhere): nothing of this call is bound there, so nothing to undo.
        pass


# The client's timer fires first and cancels the call, a transit before the server's copy
# of the deadline: a call cancelled this close to its deadline was ended by the deadline.
DEADLINE_SLACK_SECONDS = 0.25


def _ended_by_client(context: Ctx) -> grpc.StatusCode:
    """How a call the client ended is recorded: DEADLINE_EXCEEDED at its deadline, else
    CANCELLED. Neither is a server fault (a short deadline or a Ctrl-C must not page
    anyone); a call stuck on the server shows in latency and in "rpc abandoned"."""
    remaining = context.time_remaining()
    if remaining is not None and remaining <= DEADLINE_SLACK_SECONDS:
        return grpc.StatusCode.DEADLINE_EXCEEDED
    return grpc.StatusCode.CANCELLED


def _code_of(context: Ctx, default: grpc.StatusCode = grpc.StatusCode.OK) -> grpc.StatusCode:
    code = context.code()
    if code is None:
        return default
    if isinstance(code, grpc.StatusCode):
        return code
    return default


def _log_call(
    method: str, caller: Caller | None, code: grpc.StatusCode, started: float, fault: bool
) -> None:
    fields: dict[str, Any] = {
        "method": method,
        "status": code.name,
        "latency_ms": round((time.perf_counter() - started) * 1000, 2),
    }
    if caller is not None:
        fields.update(
            request_id=caller.request_id,
            tenant_id=caller.tenant_id,
            key_id=caller.key.key_id,
            principal=caller.principal,
        )
    if fault:
        _log.warning("rpc failed", **fields)
    else:
        _log.info("rpc", **fields)


def _refusing_handler(method: str) -> Handler:
    async def refuse(request: Any, context: Ctx) -> Any:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            bounded(f"method {method} is not part of the brain.v1 API"),
        )

    return grpc.unary_unary_rpc_method_handler(refuse)
