"""Page tokens and cursors belong to whom they were issued: the tenant and principal of
the key that was given them. Presented by anyone else they fail exactly as a forged one
does; a key rotated for the same principal goes on with them; each answers only the RPC
that issued it; tokens of the previous releases are still accepted (what a client holds
across an upgrade)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc

from brain.v1 import (
    audit_pb2,
    common_pb2,
    knowledge_pb2,
    knowledge_pb2_grpc,
    memory_pb2,
    review_pb2,
)

from . import previous_release
from .conftest import BrainServer, unique
from .edge import outcome
from .helpers import Api

PERMISSIONS = (
    "memories:read,memories:write,memories:propose,memories:review,audit:read,"
    "knowledge:read,knowledge:write"
)
PAIRS = [  # each pair is one conflict (tests/test_conflicts.py)
    ("The staging database listens on port 5433", "The staging database now listens on port 5434"),
    ("The team meeting is at 2pm on Friday", "The team meeting moved to 3pm on Friday"),
]


@dataclass
class Paged:
    """One RPC that takes a token: how a key is issued one, and the call presenting it."""

    name: str
    field: str
    issue: Callable[[Api], Awaitable[str]]
    present: Callable[[Api, str], Awaitable[Any]]


async def list_memories(api: Api, token: str = "") -> memory_pb2.ListMemoriesResponse:
    return await api.memories.ListMemories(
        memory_pb2.ListMemoriesRequest(scope=api.scope(), page_size=1, page_token=token),
        metadata=api.md,
    )


async def list_candidates(api: Api, token: str = "") -> review_pb2.ListCandidatesResponse:
    return await api.review.ListCandidates(
        review_pb2.ListCandidatesRequest(scope=api.scope(), page_size=1, page_token=token),
        metadata=api.md,
    )


async def list_conflicts(api: Api, token: str = "") -> review_pb2.ListConflictsResponse:
    return await api.review.ListConflicts(
        review_pb2.ListConflictsRequest(scope=api.scope(), page_size=1, page_token=token),
        metadata=api.md,
    )


async def list_documents(api: Api, token: str = "") -> knowledge_pb2.ListDocumentsResponse:
    return await knowledge_pb2_grpc.KnowledgeServiceStub(api.channel).ListDocuments(
        knowledge_pb2.ListDocumentsRequest(scope=api.scope(), page_size=1, page_token=token),
        metadata=api.md,
    )


async def list_events(
    api: Api, token: str = "", size: int = 1
) -> audit_pb2.ListAuditEventsResponse:
    return await api.audit.ListAuditEvents(
        audit_pb2.ListAuditEventsRequest(scope=api.scope(), page_size=size, page_token=token),
        metadata=api.md,
    )


async def watch_marker(api: Api) -> str:
    """The cursor a Watch opened now starts after."""
    call = api.memories.WatchMemories(
        memory_pb2.WatchMemoriesRequest(scope=api.scope()), metadata=api.md
    )
    try:
        return (await call.read()).cursor
    finally:
        call.cancel()


async def watch_from(api: Api, cursor: str) -> str:
    """The id of the first memory a Watch from ``cursor`` delivers."""
    call = api.memories.WatchMemories(
        memory_pb2.WatchMemoriesRequest(scope=api.scope(), cursor=cursor), metadata=api.md
    )

    async def first() -> str:
        async for item in call:
            if item.HasField("memory"):
                return str(item.memory.id)
        raise AssertionError("the watch ended without a change")

    try:
        return await asyncio.wait_for(first(), 15)
    finally:
        call.cancel()


async def next_token(page: Awaitable[Any]) -> str:
    token = (await page).next_page_token
    assert token
    return str(token)


async def items(page: Awaitable[Any], name: str) -> list[Any]:
    """What a page holds, without its next token (sealed afresh at every call)."""
    return list(getattr(await page, name))


async def export_cursor(api: Api) -> str:
    return str((await api.export())[0].cursor)


async def export_ids(api: Api, cursor: str) -> list[str]:
    return [e.memory.id for e in await api.export(cursor=cursor)]


PAGED = [
    Paged("ListMemories", "page_token", lambda a: next_token(list_memories(a)),
          lambda a, t: items(list_memories(a, t), "memories")),
    Paged("ExportMemories", "cursor", export_cursor, export_ids),
    Paged("ListCandidates", "page_token", lambda a: next_token(list_candidates(a)),
          lambda a, t: items(list_candidates(a, t), "candidates")),
    Paged("ListConflicts", "page_token", lambda a: next_token(list_conflicts(a)),
          lambda a, t: items(list_conflicts(a, t), "conflicts")),
    Paged("ListDocuments", "page_token", lambda a: next_token(list_documents(a)),
          lambda a, t: items(list_documents(a, t), "documents")),
    Paged("ListAuditEvents", "page_token", lambda a: next_token(list_events(a)),
          lambda a, t: items(list_events(a, t), "events")),
    Paged("WatchMemories", "cursor", watch_marker, watch_from),
]  # fmt: skip


def paged_on(answer: Any) -> bool:
    """A page or an export with something in it, or a watched memory's id."""
    return bool(answer)


def forged(token: str) -> str:
    """``token`` with one character in its middle edited."""
    middle = len(token) // 2
    return token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1 :]


async def rotated(server: BrainServer, api: Api) -> Api:
    """A's key rotated by brain-admin: a new key of the same tenant and principal."""
    key_id = (await api.whoami()).key_id
    done = await asyncio.to_thread(
        server.admin, "keys", "rotate", key_id, "--grace", "1h", "--json"
    )
    return Api(api.channel, json.loads(done.stdout)["key"])


async def something_on_every_page(alice: Api) -> None:
    """Two of everything a paged RPC lists: conflicts, candidates, documents."""
    for older, newer in PAIRS:
        await alice.save(older)
        assert (await alice.save(newer)).conflicts
    for i in range(2):
        await alice.review.ProposeMemory(
            review_pb2.ProposeMemoryRequest(
                scope=alice.scope(),
                memory=common_pb2.MemoryDraft(content=f"proposed note {i}"),
                reason="worth keeping",
            ),
            metadata=alice.md,
        )
    for i in range(2):
        await knowledge_pb2_grpc.KnowledgeServiceStub(alice.channel).PutDocument(
            knowledge_pb2.PutDocumentRequest(
                scope=alice.scope(), collection="docs", path=f"d{i}.md", content=f"# d{i}\n\nx\n"
            ),
            metadata=alice.md,
        )


async def test_a_token_answers_only_its_holders_principal(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """On every RPC that takes a token, one issued to key A and presented by another
    principal of A's tenant (who sees the same rows) or by a key of another tenant (the
    same principal name) answers exactly as a forged token does; the same call with the
    same token pages on for A and for A's rotated key (positive control)."""
    tenant = unique("t")
    alice = Api(channel, brain_server.mint_key(tenant, "alice", permissions=PERMISSIONS))
    for i in range(3):
        await alice.save(f"alice's note {i}")
    await something_on_every_page(alice)
    alice_again = await rotated(brain_server, alice)
    bob = Api(channel, brain_server.mint_key(tenant, "bob", permissions=PERMISSIONS))
    elsewhere = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=PERMISSIONS))

    for paged in PAGED:
        token = await paged.issue(alice)
        if paged.name == "WatchMemories":  # something after the cursor to page on to
            await alice.save("written after the watch cursor")
        for other in (bob, elsewhere):
            seen = await outcome(paged.present(other, token))
            like_forged = await outcome(paged.present(other, forged(token)))
            assert like_forged[0] == grpc.StatusCode.INVALID_ARGUMENT, paged.name
            assert like_forged[1].startswith(paged.field), (paged.name, like_forged)
            assert seen == like_forged, paged.name
        own = await outcome(paged.present(alice, token))
        assert own[0] == grpc.StatusCode.OK and paged_on(own[1]), (paged.name, own)
        assert await outcome(paged.present(alice_again, token)) == own, paged.name


async def test_a_token_answers_only_the_rpc_that_issued_it(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A token one RPC issued, presented by its own holder to any other RPC that takes a
    token (a ListMemories page token to ListCandidates, an audit page token to Watch),
    answers exactly as a forged token does; to the RPC that issued it, it pages on
    (positive control)."""
    alice = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=PERMISSIONS))
    for i in range(3):
        await alice.save(f"alice's note {i}")
    await something_on_every_page(alice)
    tokens = {paged.name: await paged.issue(alice) for paged in PAGED}
    await alice.save("written after the watch cursor")  # for Watch to page on to
    for paged in PAGED:
        for other in PAGED:
            if other is paged:
                continue
            token = tokens[paged.name]
            seen = await outcome(other.present(alice, token))
            like_forged = await outcome(other.present(alice, forged(token)))
            assert like_forged[0] == grpc.StatusCode.INVALID_ARGUMENT, other.name
            assert like_forged[1].startswith(other.field), (other.name, like_forged)
            assert seen == like_forged, (paged.name, other.name, seen)
        own = await outcome(paged.present(alice, tokens[paged.name]))
        assert own[0] == grpc.StatusCode.OK and paged_on(own[1]), (paged.name, own)


async def test_a_page_token_does_not_read_as_its_position(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A List page token carries neither the id it resumes after nor its time readably,
    and two for the same position differ; the server resumes from it (positive control)."""
    alice = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    for i in range(2):
        await alice.save(f"alice's note {i}")
    first, again = await list_memories(alice), await list_memories(alice)
    token = first.next_page_token
    assert token and token != again.next_page_token
    body = token[1:]
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    last = first.memories[0].id
    assert last not in token and last.encode() not in raw and b'"k"' not in raw
    second = await list_memories(alice, token)
    assert [m.id for m in second.memories] != [last] and len(second.memories) == 1


async def test_tokens_of_the_previous_release_are_still_accepted(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A Watch cursor or audit page token sealed (``s…``) or signed (``<seq>.<mac>``) by
    the previous release resumes where it points, and its signed page token pages on,
    exactly as the tokens issued now do (a client's stored cursor survives the upgrade)."""
    tenant = unique("t")
    pepper = brain_server.cluster.pepper
    alice = Api(channel, brain_server.mint_key(tenant, "alice", permissions=PERMISSIONS))
    ids = [(await alice.save(f"alice's note {i}")).memory.id for i in range(3)]
    seqs = [
        r[0]
        for r in brain_server.sql(
            "SELECT seq FROM audit_events e JOIN tenants t USING (tenant_id)"
            " WHERE t.name = $1 ORDER BY seq",
            tenant,
        )
    ]
    first_save = seqs[-3]  # each save is one event, the last three
    after_it = list((await list_events(alice, size=100)).events)[-2:]
    for old in (previous_release.sealed_cursor(pepper, first_save),
                previous_release.signed(pepper, str(first_save))):  # fmt: skip
        assert list((await list_events(alice, old, size=100)).events) == after_it
        assert await watch_from(alice, old) == ids[1]
    now_page = await list_memories(alice)
    old_page = previous_release.page_token(
        pepper, {"k": now_page.memories[0].id, "a": datetime.now(UTC).isoformat()}
    )
    assert (await list_memories(alice, old_page)).memories == (
        await list_memories(alice, now_page.next_page_token)
    ).memories
    # The release before kinds sealed tokens for their holder and no RPC: still accepted.
    holder = await alice.whoami()
    bound = previous_release.holder_cursor(pepper, holder, first_save)
    assert list((await list_events(alice, bound, size=100)).events) == after_it
    assert await watch_from(alice, bound) == ids[1]
    bound_page = previous_release.holder_page_token(
        pepper, holder, {"k": now_page.memories[0].id, "a": datetime.now(UTC).isoformat()}
    )
    assert (await list_memories(alice, bound_page)).memories == (
        await list_memories(alice, now_page.next_page_token)
    ).memories
