"""Fuzzing every RPC: whatever a caller sends, the answer is never INTERNAL or UNKNOWN.

Requests are generated from each method's request descriptor (random unicode with NULs,
huge and negative numbers, unknown enum values, timestamps and durations outside
protobuf's range), sent as raw bytes through a channel with identity serializers, next to
bodies that are random bytes or valid messages cut short. After each method's run the
server must still answer health SERVING.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brain.authz import ALL_PERMISSIONS
from brain.v1 import audit_pb2, common_pb2, identity_pb2, knowledge_pb2, memory_pb2, review_pb2

from .conftest import BrainServer, unique

FILES = (memory_pb2, review_pb2, audit_pb2, identity_pb2, knowledge_pb2)
METHODS: list[MethodDescriptor] = [
    method
    for module in FILES
    for service in module.DESCRIPTOR.services_by_name.values()
    for method in service.methods
]
FORBIDDEN = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
MAX_DEPTH = 3
FUZZ = settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Edge values first: hypothesis mixes them with uniformly drawn ones.
INT32 = st.one_of(
    st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31)]), st.integers(-(2**31), 2**31 - 1)
)
INT64 = st.one_of(
    st.sampled_from([0, 1, -1, 2**62, -(2**62), 2**63 - 1, -(2**63)]),
    st.integers(-(2**63), 2**63 - 1),
)
UINT32 = st.integers(0, 2**32 - 1)
UINT64 = st.integers(0, 2**64 - 1)
TIMESTAMP_SECONDS = st.one_of(
    st.sampled_from(
        [0, 1_700_000_000, -62_135_596_801, -62_135_596_800, 253_402_300_799, 253_402_300_800]
    ),
    INT64,
)
NANOS = st.one_of(st.sampled_from([0, -1, 999_999_999, 1_000_000_000]), INT32)
DURATION_SECONDS = st.one_of(
    st.sampled_from([0, 1, -1, 3600, 315_576_000_000, 315_576_000_001, 2**62, -(2**62)]), INT64
)
# Strings: names the server accepts (to get past scope checks), then anything protobuf
# allows in a string (unicode without lone surrogates, NULs included).
WORDS = ["", "proj", "team", "alice", "x", "a" * 300, "\x00", "proj\x00", "2024-01-01T00:00:00Z"]
TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)

_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FieldDescriptor.TYPE_INT32: INT32,
    FieldDescriptor.TYPE_SINT32: INT32,
    FieldDescriptor.TYPE_SFIXED32: INT32,
    FieldDescriptor.TYPE_INT64: INT64,
    FieldDescriptor.TYPE_SINT64: INT64,
    FieldDescriptor.TYPE_SFIXED64: INT64,
    FieldDescriptor.TYPE_UINT32: UINT32,
    FieldDescriptor.TYPE_FIXED32: UINT32,
    FieldDescriptor.TYPE_UINT64: UINT64,
    FieldDescriptor.TYPE_FIXED64: UINT64,
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_FLOAT: st.floats(width=32),
    FieldDescriptor.TYPE_DOUBLE: st.floats(),
    FieldDescriptor.TYPE_BYTES: st.binary(max_size=64),
}


def _strings(ids: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(WORDS + ids), TEXT)


def _field(fd: FieldDescriptor, depth: int, ids: list[str]) -> st.SearchStrategy[Any]:
    if fd.type == FieldDescriptor.TYPE_MESSAGE:
        return message_strategy(fd.message_type, depth + 1, ids)
    if fd.type == FieldDescriptor.TYPE_STRING:
        return _strings(ids)
    if fd.type == FieldDescriptor.TYPE_ENUM:
        known = [v.number for v in fd.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-(2**31), 2**31 - 1))
    return _SCALARS[fd.type]


def message_strategy(desc: Descriptor, depth: int, ids: list[str]) -> st.SearchStrategy[Any]:
    """Random instances of ``desc``: every field unset or set to a random (often bad) value."""
    cls = message_factory.GetMessageClass(desc)
    if desc.full_name == "google.protobuf.Timestamp":
        return st.builds(lambda s, n: cls(seconds=s, nanos=n), TIMESTAMP_SECONDS, NANOS)
    if desc.full_name == "google.protobuf.Duration":
        return st.builds(lambda s, n: cls(seconds=s, nanos=n), DURATION_SECONDS, NANOS)
    if depth > MAX_DEPTH:
        return st.just(cls())
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for fd in desc.fields:
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            key_fd = fd.message_type.fields_by_name["key"]
            value_fd = fd.message_type.fields_by_name["value"]
            value = st.dictionaries(
                _field(key_fd, depth, ids), _field(value_fd, depth, ids), max_size=3
            )
        elif fd.is_repeated:
            value = st.lists(_field(fd, depth, ids), max_size=3)
        else:
            value = _field(fd, depth, ids)
        parts[fd.name] = st.one_of(st.none(), value)
    return st.fixed_dictionaries(parts).map(lambda values: _build(cls, values))


def _build(cls: Any, values: dict[str, Any]) -> Message:
    msg = cls()
    for name, value in values.items():
        if value is None:
            continue
        fd = msg.DESCRIPTOR.fields_by_name[name]
        target = getattr(msg, name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            for k, v in value.items():
                if isinstance(v, Message):
                    target[k].CopyFrom(v)
                else:
                    target[k] = v
        elif fd.is_repeated:
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                for item in value:
                    target.add().CopyFrom(item)
            else:
                target.extend(value)
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            target.CopyFrom(value)
        else:
            setattr(msg, name, value)
    return msg


def _in_scope(drawn: tuple[Message, bool]) -> bytes:
    """Half the requests get a valid scope, so they get past the front door more often."""
    msg, fix_scope = drawn
    if fix_scope and "scope" in msg.DESCRIPTOR.fields_by_name:
        msg.scope.CopyFrom(common_pb2.Scope(namespace="proj"))  # type: ignore[attr-defined]
    return msg.SerializeToString()


def _bodies(method: MethodDescriptor, ids: list[str]) -> st.SearchStrategy[bytes]:
    """Serialized random requests, random bytes, and valid requests cut short."""
    serialized = st.tuples(message_strategy(method.input_type, 0, ids), st.booleans()).map(
        _in_scope
    )
    truncated = st.tuples(serialized, st.integers(1, 64)).map(lambda t: t[0][: -t[1]])
    return st.one_of(serialized, serialized, st.binary(max_size=256), truncated)


@pytest.fixture(scope="module")
def fuzz_target(brain_server: BrainServer) -> Iterator[tuple[grpc.Channel, str, list[str]]]:
    """A sync channel, a key with every permission in a fresh tenant, and ids it can see."""
    key = brain_server.mint_key(
        unique("fuzz"), "agent:fuzz", permissions=",".join(sorted(ALL_PERMISSIONS))
    )
    md = (("authorization", f"Bearer {key}"),)
    with grpc.insecure_channel(brain_server.target) as channel:
        save = channel.unary_unary(
            "/brain.v1.MemoryService/SaveMemory",
            request_serializer=memory_pb2.SaveMemoryRequest.SerializeToString,
            response_deserializer=memory_pb2.SaveMemoryResponse.FromString,
        )
        ids = [
            save(
                memory_pb2.SaveMemoryRequest(
                    scope=common_pb2.Scope(namespace="proj"),
                    memory=common_pb2.MemoryDraft(content=f"fuzz seed {secrets.token_hex(4)}"),
                ),
                metadata=md,
            ).memory.id
            for _ in range(2)
        ]
        yield channel, key, ids


def _call(
    channel: grpc.Channel, method: MethodDescriptor, body: bytes, key: str
) -> grpc.StatusCode:
    """Send ``body`` raw and return the answer's code; fail on INTERNAL or UNKNOWN."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    md = (("authorization", f"Bearer {key}"),)
    try:
        if method.server_streaming:
            stream = channel.unary_stream(path)(body, metadata=md, timeout=10)
            try:
                next(stream, None)  # a live Watch never ends: its first answer is enough
            finally:
                stream.cancel()
        else:
            channel.unary_unary(path)(body, metadata=md, timeout=10)
    except grpc.RpcError as err:
        code: grpc.StatusCode = err.code()  # type: ignore[attr-defined]
        assert code not in FORBIDDEN, f"{path} answered {code}: {err.details()}"  # type: ignore[attr-defined]
        return code
    return grpc.StatusCode.OK


def _assert_serving(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    answer = health.Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_no_request_gets_internal_or_unknown(
    fuzz_target: tuple[grpc.Channel, str, list[str]], method: MethodDescriptor
) -> None:
    """Random, malformed and truncated requests to each RPC get a caller-facing status
    (never INTERNAL/UNKNOWN), and the server still answers health SERVING afterwards."""
    channel, key, ids = fuzz_target
    seen: set[grpc.StatusCode] = set()

    @FUZZ
    @given(body=_bodies(method, ids))
    def run(body: bytes) -> None:
        seen.add(_call(channel, method, body, key))

    run()
    _assert_serving(channel)
    # Positive control: the requests got past the front door (a key that is refused, or a
    # server that is down, would answer every body alike and pass the check above).
    assert seen - {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE}, seen


def test_the_fuzzer_reaches_the_servicers(
    fuzz_target: tuple[grpc.Channel, str, list[str]],
) -> None:
    """Positive control: the raw channel and key the fuzzer uses get OK for a valid request,
    so the fuzz tests above exercise the servicers, not only the front door."""
    channel, key, ids = fuzz_target
    get = channel.unary_unary("/brain.v1.MemoryService/GetMemory")
    body = memory_pb2.GetMemoryRequest(scope=common_pb2.Scope(namespace="proj"), id=ids[0])
    raw = get(body.SerializeToString(), metadata=(("authorization", f"Bearer {key}"),))
    assert memory_pb2.GetMemoryResponse.FromString(raw).memory.id == ids[0]
