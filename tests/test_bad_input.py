"""The defects the robustness fuzzing found, pinned one by one: each is INVALID_ARGUMENT
naming the field, nothing is written, and the same request without the defect succeeds."""

from __future__ import annotations

import base64

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from brain.v1 import audit_pb2, common_pb2, identity_pb2, identity_pb2_grpc, memory_pb2, review_pb2

from .conftest import BrainServer, unique
from .helpers import Api, rpc_error

ALL = "memories:read,memories:write,memories:propose,memories:review,memories:forget,audit:read"


def assert_invalid(err: grpc.aio.AioRpcError, field: str) -> None:
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (err.code(), err.details())
    assert field in (err.details() or ""), err.details()


async def test_out_of_range_timestamps_and_durations_name_the_field(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """nanos -1, seconds past year 9999 and a 2^62 s review_within are INVALID_ARGUMENT naming
    the field, and nothing is saved; the same requests in range succeed."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=ALL))
    for bad in (Timestamp(nanos=-1), Timestamp(seconds=253_402_300_800)):
        err = await rpc_error(api.save("timestamps out of range", valid_from=bad))
        assert_invalid(err, "memory.valid_from")
    err = await rpc_error(
        api.memories.GetMemory(
            memory_pb2.GetMemoryRequest(
                scope=api.scope(),
                id="0" * 32,
                time=common_pb2.TimeTravel(as_of=Timestamp(nanos=-1)),
            ),
            metadata=api.md,
        )
    )
    assert_invalid(err, "time.as_of")
    assert await api.list_all() == []  # nothing half-written

    propose = review_pb2.ProposeMemoryRequest(
        scope=api.scope(),
        memory=common_pb2.MemoryDraft(content="proposal with a huge review window"),
        reason="fuzz found it",
        review_within=Duration(seconds=2**62),
    )
    err = await rpc_error(api.review.ProposeMemory(propose, metadata=api.md))
    assert_invalid(err, "review_within")

    saved = await api.save("timestamps in range", valid_from=Timestamp(seconds=1_700_000_000))
    assert saved.memory.valid_from.seconds == 1_700_000_000
    assert [m.id for m in await api.list_all()] == [saved.memory.id]  # control: listed now
    assert (await api.get(saved.memory.id, as_of=saved.memory.recorded_at)).version == 1
    propose.review_within.CopyFrom(Duration(seconds=3600))
    proposed = await api.review.ProposeMemory(propose, metadata=api.md)
    assert proposed.candidate.status == common_pb2.MEMORY_STATUS_CANDIDATE


async def test_the_instants_the_driver_reads_as_infinity_are_refused(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z are stored as -infinity and
    infinity and read back without a time zone; a save that set one beside a similar memory
    failed INTERNAL in conflict detection, and later similar saves with it. Both are
    INVALID_ARGUMENT naming the field, nothing is saved, and the instants one microsecond
    inside them are stored and compared as any other."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=ALL))
    peer = await api.save("The deploy window opens at 2pm on Friday")
    for bad in (
        Timestamp(seconds=-62_135_596_800),
        Timestamp(seconds=-62_135_596_800, nanos=999),  # the same microsecond
        Timestamp(seconds=253_402_300_799, nanos=999_999_000),
        Timestamp(seconds=253_402_300_799, nanos=999_999_999),
    ):
        err = await rpc_error(api.save("The deploy window opens at 3pm on Friday", valid_from=bad))
        assert_invalid(err, "memory.valid_from")
    assert [m.id for m in await api.list_all()] == [peer.memory.id]  # nothing half-written

    first = Timestamp(seconds=-62_135_596_800, nanos=1_000)
    last = Timestamp(seconds=253_402_300_799, nanos=999_998_000)
    early = await api.save("The deploy window opens at 3pm on Friday", valid_from=first)
    assert (early.memory.valid_from.seconds, early.memory.valid_from.nanos) == (
        -62_135_596_800,
        1_000,
    )
    late = await api.save(
        "The deploy window opens at 4pm on Friday", valid_from=first, valid_to=last
    )
    assert late.memory.valid_to.nanos == 999_998_000
    again = await api.save(
        "The deploy window opens at 5pm on Friday"
    )  # the bucket still takes saves
    assert len(await api.list_all()) == 4 and again.memory.id


async def test_nul_bytes_in_scope_are_refused_on_every_rpc(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A NUL byte in scope.namespace/user_id/session_id is INVALID_ARGUMENT on reads and on
    Forget too (PostgreSQL refuses 0x00), and the memory it aimed at is untouched."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=ALL))
    mid = (await api.save("kept despite a NUL-byte forget")).memory.id
    for field in ("namespace", "user_id", "session_id"):
        bad_scope = api.scope(**{field: "proj\x00"})
        err = await rpc_error(
            api.memories.ForgetMemory(
                memory_pb2.ForgetMemoryRequest(scope=bad_scope, id=mid), metadata=api.md
            )
        )
        assert_invalid(err, f"scope.{field}")
        err = await rpc_error(
            api.memories.SearchMemories(
                memory_pb2.SearchMemoriesRequest(scope=bad_scope, query="kept"), metadata=api.md
            )
        )
        assert_invalid(err, f"scope.{field}")
    err = await rpc_error(
        api.memories.SearchMemories(
            memory_pb2.SearchMemoriesRequest(
                scope=api.scope(), query="kept", filter=common_pb2.MemoryFilter(tags=["a\x00b"])
            ),
            metadata=api.md,
        )
    )
    assert_invalid(err, "filter.tags[0]")
    assert (await api.get(mid)).content == "kept despite a NUL-byte forget"
    assert await api.search("kept") == [mid]  # control: the same search, well formed


async def test_forged_page_tokens_and_cursors_are_invalid_argument(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Forged, tampered and absurd tokens and cursors on every paged or resumable RPC are
    INVALID_ARGUMENT naming the field; the tokens the server issued still work."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=ALL))
    for i in range(3):
        await api.save(f"paged note {i}")
    first = await api.memories.ListMemories(
        memory_pb2.ListMemoriesRequest(scope=api.scope(), page_size=1), metadata=api.md
    )
    issued = first.next_page_token
    assert issued
    middle = len(issued) // 2  # an edited character, not the last one's padding bits
    tampered = issued[:middle] + ("A" if issued[middle] != "A" else "B") + issued[middle + 1 :]
    mac = "A" * 22  # the length of the previous release's MACs
    deep = base64.urlsafe_b64encode(b"[" * 100_000).decode()
    forged = [
        "garbage!",
        deep,
        deep + "." + mac,
        tampered,
        base64.urlsafe_b64encode(b'{"k":"00000000-0000-0000-0000-000000000000","a":"0001-01-01"}')
        .decode()
        .rstrip("="),
        "99999999999999999999",
        "123." + mac,
        "p" + deep[:200],
        "c" + deep[:200],
        "s" + deep[:200],
    ]
    for token in forged:
        calls = {
            "page_token": [
                api.memories.ListMemories(
                    memory_pb2.ListMemoriesRequest(scope=api.scope(), page_token=token),
                    metadata=api.md,
                ),
                api.review.ListCandidates(
                    review_pb2.ListCandidatesRequest(scope=api.scope(), page_token=token),
                    metadata=api.md,
                ),
                api.audit.ListAuditEvents(
                    audit_pb2.ListAuditEventsRequest(scope=api.scope(), page_token=token),
                    metadata=api.md,
                ),
            ],
            "cursor": [api.export(cursor=token)],
        }
        for field, coros in calls.items():
            for coro in coros:
                assert_invalid(await rpc_error(coro), field)
        watch = api.memories.WatchMemories(
            memory_pb2.WatchMemoriesRequest(scope=api.scope(), cursor=token), metadata=api.md
        )
        assert_invalid(await rpc_error(watch.read()), "cursor")

    second = await api.memories.ListMemories(
        memory_pb2.ListMemoriesRequest(scope=api.scope(), page_size=1, page_token=issued),
        metadata=api.md,
    )
    assert len(second.memories) == 1 and second.memories[0].id != first.memories[0].id
    events = await api.audit.ListAuditEvents(
        audit_pb2.ListAuditEventsRequest(scope=api.scope(), page_size=1), metadata=api.md
    )
    more = await api.audit.ListAuditEvents(
        audit_pb2.ListAuditEventsRequest(
            scope=api.scope(), page_size=1, page_token=events.next_page_token
        ),
        metadata=api.md,
    )
    first_event, next_event = events.events[0], more.events[0]
    assert first_event.at.ToDatetime() <= next_event.at.ToDatetime()
    assert next_event != first_event
    exported = await api.export()
    resumed = await api.export(cursor=exported[0].cursor)
    assert [e.memory.id for e in resumed] == [e.memory.id for e in exported[1:]]


async def test_unparseable_bodies_are_invalid_argument_without_internals(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Bad UTF-8 in a string field and a truncated body are INVALID_ARGUMENT that name the
    request, not the parser; the same body intact is served."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=ALL))
    save = channel.unary_unary("/brain.v1.MemoryService/SaveMemory")
    good = memory_pb2.SaveMemoryRequest(
        scope=api.scope(), memory=common_pb2.MemoryDraft(content="an intact raw body")
    ).SerializeToString()
    bad_utf8 = good.replace(b"an intact raw body", b"an intact raw b\xff\xfe ")
    assert len(bad_utf8) == len(good)
    for body in (bad_utf8, good[:-3], b"\xff" * 7):
        err = await rpc_error(save(body, metadata=api.md))
        assert_invalid(err, "request")
        details = err.details() or ""
        assert "DecodeError" not in details and "protobuf" not in details, details
    answer = memory_pb2.SaveMemoryResponse.FromString(await save(good, metadata=api.md))
    assert answer.memory.content == "an intact raw body"


async def test_a_long_bad_argument_is_still_invalid_argument_naming_its_field(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A refusal that repeats a long bad argument (10,000 characters of an unknown mask
    path, 5,000 unknown paths, a long CJK path) made the message outgrow gRPC's header
    limit, and the caller saw RESOURCE_EXHAUSTED. The message is cut, the code and the
    field stay, and nothing changes; the same update with a real path works."""
    from brain.authz._messages import MAX_MESSAGE_BYTES

    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=ALL))
    saved = await api.save("a memory to update")
    for paths in (["c" * 10_000], [f"p{i}" for i in range(5_000)], ["記憶" * 3_000]):
        err = await rpc_error(api.update(saved.memory.id, paths, importance=0.5))
        assert_invalid(err, "update_mask")
        assert (err.details() or "").startswith("update_mask: ")
        assert len((err.details() or "").encode()) <= MAX_MESSAGE_BYTES
        assert (err.details() or "").endswith("[cut]")
    assert [m.version for m in await api.history(saved.memory.id)] == [1]  # nothing changed
    updated = await api.update(saved.memory.id, ["importance"], importance=0.7)
    assert (updated.version, round(updated.importance, 2)) == (2, 0.7)


async def test_a_filter_that_contradicts_its_scope_is_invalid_argument_for_any_key(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A filter naming another namespace or user than the request's scope contradicts the
    request itself: INVALID_ARGUMENT naming the filter's field, for an unconfined key as for
    a confined one (it was PERMISSION_DENIED, as if the key lacked a right); the filter that
    repeats the scope lists the memory."""
    tenant = unique("t")
    unconfined = Api(channel, brain_server.mint_key(tenant, "admin", permissions=ALL))
    confined = Api(
        channel,
        brain_server.mint_key(tenant, "alice", permissions=ALL, user="alice"),
        user_id="alice",
    )
    saved = await confined.save("a memory the filters look for")
    for api, bad in (
        (unconfined, common_pb2.MemoryFilter(namespaces=["elsewhere"])),
        (unconfined, common_pb2.MemoryFilter(namespaces=["bad ns!"])),
        (confined, common_pb2.MemoryFilter(namespaces=["elsewhere"])),
        (confined, common_pb2.MemoryFilter(user_id="bob")),
    ):
        err = await rpc_error(api.list_all(filter=bad))
        field = "filter.user_id" if bad.user_id else "filter.namespaces"
        assert_invalid(err, field)
    # Control: the filter repeating the scope is read as any other.
    same = common_pb2.MemoryFilter(namespaces=[confined.scope().namespace], user_id="alice")
    assert [m.id for m in await confined.list_all(filter=same)] == [saved.memory.id]


async def test_values_no_caller_means_are_refused_by_name(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A negative expected_version (ABORTED "retry" before), a review window under a second
    ("must be positive" of a positive value), an empty metadata key (stored before), a
    validity that ends where it starts (stored, valid at no instant) and a filter of
    thousands of tags (accepted before) are INVALID_ARGUMENT naming the field and change
    nothing; the same requests with sensible values succeed."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=ALL))
    saved = await api.save("a memory to update carefully")
    err = await rpc_error(api.update(saved.memory.id, ["content"], -1, content="changed"))
    assert_invalid(err, "expected_version")
    err = await rpc_error(api.save("metadata with an empty key", metadata={"": "v"}))
    assert_invalid(err, "memory.metadata key")
    moment = Timestamp(seconds=1_700_000_000)
    err = await rpc_error(api.save("valid at no instant", valid_from=moment, valid_to=moment))
    assert_invalid(err, "memory.valid_to")  # [from, to) with from == to holds nowhere
    err = await rpc_error(
        api.list_all(filter=common_pb2.MemoryFilter(tags=[f"t{i}" for i in range(10_000)]))
    )
    assert_invalid(err, "filter.tags")
    propose = review_pb2.ProposeMemoryRequest(
        scope=api.scope(),
        memory=common_pb2.MemoryDraft(content="a proposal with a tiny review window"),
        reason="checking the window",
        review_within=Duration(nanos=500),
    )
    err = await rpc_error(api.review.ProposeMemory(propose, metadata=api.md))
    assert_invalid(err, "review_within")
    err = await rpc_error(api.save("a label left empty", labels=["team", ""]))
    assert_invalid(err, "memory.labels[1]")  # the entry, not "labels: is required"
    assert [m.id for m in await api.list_all()] == [saved.memory.id]  # nothing written
    assert (await api.get(saved.memory.id)).version == 1

    # Controls: the same requests with values that mean something.
    assert (await api.update(saved.memory.id, ["content"], 1, content="changed")).version == 2
    kept = await api.save(
        "metadata with a key",
        metadata={"k": "v"},
        tags=["t1"],
        valid_from=moment,
        valid_to=Timestamp(seconds=4_000_000_000),  # valid now: listed by default
    )
    assert dict(kept.memory.metadata) == {"k": "v"}
    many = common_pb2.MemoryFilter(tags=[f"t{i}" for i in range(64)])  # the cap: accepted
    assert [m.id for m in await api.list_all(filter=many)] == []  # a memory holds every tag
    tagged = common_pb2.MemoryFilter(tags=["t1"])
    assert [m.id for m in await api.list_all(filter=tagged)] == [kept.memory.id]
    propose.review_within.CopyFrom(Duration(seconds=1))
    proposed = await api.review.ProposeMemory(propose, metadata=api.md)
    assert proposed.candidate.status == common_pb2.MEMORY_STATUS_CANDIDATE


async def test_whoami_refuses_a_scope_no_other_call_would_take(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """WhoAmI answered OK for a malformed namespace that every other call refuses; a client
    checking its scope at start learnt nothing. It is INVALID_ARGUMENT naming the field;
    an empty scope and a well-formed one are answered."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=ALL))
    stub = identity_pb2_grpc.IdentityServiceStub(channel)
    for field, scope in (
        ("scope.namespace", common_pb2.Scope(namespace="bad ns!")),
        ("scope.user_id", common_pb2.Scope(namespace="proj", user_id="-bad")),
    ):
        err = await rpc_error(stub.WhoAmI(identity_pb2.WhoAmIRequest(scope=scope), metadata=api.md))
        assert_invalid(err, field)
    for scope in (common_pb2.Scope(), common_pb2.Scope(namespace="proj", user_id="alice")):
        answer = await stub.WhoAmI(identity_pb2.WhoAmIRequest(scope=scope), metadata=api.md)
        assert answer.principal == "alice"


async def test_a_scope_name_no_write_would_take_is_refused_by_every_read(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A 200-character or spaced user id, namespace or session id was refused by SaveMemory
    naming the field and answered OK by the reads (an outside review sent 70,000
    characters). Every method now refuses it the same way; the well-formed read answers."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=ALL))
    mid = (await api.save("a memory the malformed reads never reach")).memory.id
    for field, bad in (
        ("user_id", "u" * 200),
        ("namespace", "two words"),
        ("session_id", "s" * 129),
    ):
        scope = api.scope(**{field: bad})
        calls = (
            api.memories.SearchMemories(
                memory_pb2.SearchMemoriesRequest(scope=scope, query="memory"), metadata=api.md
            ),
            api.memories.ListMemories(memory_pb2.ListMemoriesRequest(scope=scope), metadata=api.md),
            api.memories.GetMemory(
                memory_pb2.GetMemoryRequest(scope=scope, id=mid), metadata=api.md
            ),
            api.memories.BuildContext(
                memory_pb2.BuildContextRequest(scope=scope, query="memory"), metadata=api.md
            ),
        )
        for call in calls:
            assert_invalid(await rpc_error(call), f"scope.{field}")
    err = await rpc_error(
        api.memories.SearchMemories(
            memory_pb2.SearchMemoriesRequest(
                scope=api.scope(), query="memory", filter=common_pb2.MemoryFilter(user_id="x y")
            ),
            metadata=api.md,
        )
    )
    assert_invalid(err, "filter.user_id")
    assert await api.search("memory") == [mid]  # control: the same search, well formed
    assert (await api.get(mid)).content == "a memory the malformed reads never reach"


async def test_review_within_is_checked_before_a_duplicate_proposal_answers(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A proposal repeating the caller's pending one answered OK to a review window of
    10,000 years, which a new proposal is refused; both are refused now, naming the field,
    and the pending proposal keeps its window."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=ALL))

    def propose(seconds: int) -> review_pb2.ProposeMemoryRequest:
        return review_pb2.ProposeMemoryRequest(
            scope=api.scope(),
            memory=common_pb2.MemoryDraft(content="the proposal that is pending once"),
            reason="checking the window",
            review_within=Duration(seconds=seconds),
        )

    first = await api.review.ProposeMemory(propose(3600), metadata=api.md)
    assert first.candidate.status == common_pb2.MEMORY_STATUS_CANDIDATE
    ten_thousand_years = 10_000 * 365 * 86_400
    err = await rpc_error(api.review.ProposeMemory(propose(ten_thousand_years), metadata=api.md))
    assert_invalid(err, "review_within")
    again = await api.review.ProposeMemory(propose(7200), metadata=api.md)  # control
    assert again.candidate.id == first.candidate.id
