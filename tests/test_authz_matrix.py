"""The authorization matrix: every RPC x every kind of caller, from tests/data/authz_matrix.json.

The world: tenant A holds rows for alice, bob and the team in namespace "assistant" (plus
one in "ops"), and candidates for alice and bob; tenant B holds rows under the very same
names. Each case calls each RPC and compares the status — and, for reads of collections,
the exact set of world rows it returns — with the data file.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask

from brain.authz import ALL_PERMISSIONS, METHOD_CLASSES, REQUIRED_PERMISSION
from brain.v1 import (
    audit_pb2,
    common_pb2,
    graph_pb2,
    graph_pb2_grpc,
    identity_pb2,
    identity_pb2_grpc,
    knowledge_pb2,
    knowledge_pb2_grpc,
    memory_pb2,
    review_pb2,
)

from .conftest import BrainServer, unique
from .helpers import Api

GRAPH_ENTITY = "Matrix Entity"
MATRIX = json.loads((Path(__file__).parent / "data" / "authz_matrix.json").read_text())
FULL = ",".join(sorted(ALL_PERMISSIONS))
NS = "assistant"


@dataclass
class World:
    server: BrainServer
    channel: grpc.aio.Channel
    tenant_a: str
    full_a: Api
    confined: Api
    proposer: Api
    full_b: Api
    ids: dict[str, str] = field(default_factory=dict)
    limited: dict[str, Api] = field(default_factory=dict)

    def name_of(self, memory_id: str) -> str | None:
        for name, value in self.ids.items():
            if value == memory_id:
                return name
        return None

    def key_without(self, permission: str) -> Api:
        if permission not in self.limited:
            perms = ",".join(sorted(ALL_PERMISSIONS - {permission}))
            key = self.server.mint_key(
                self.tenant_a,
                f"alice-agent-no-{permission}",
                permissions=perms,
                user="alice",
                namespaces=(NS,),
            )
            self.limited[permission] = Api(self.channel, key, namespace=NS, user_id="alice")
        return self.limited[permission]


async def build_world(server: BrainServer, channel: grpc.aio.Channel) -> World:
    tenant_a, tenant_b = unique("authz-a"), unique("authz-b")
    w = World(
        server=server,
        channel=channel,
        tenant_a=tenant_a,
        full_a=Api(channel, server.mint_key(tenant_a, "admin", permissions=FULL), namespace=NS),
        confined=Api(
            channel,
            server.mint_key(
                tenant_a, "alice-agent", permissions=FULL, user="alice", namespaces=(NS,)
            ),
            namespace=NS,
            user_id="alice",
        ),
        proposer=Api(channel, server.mint_key(tenant_a, "agent:proposer", permissions=FULL)),
        full_b=Api(channel, server.mint_key(tenant_b, "b-admin", permissions=FULL), namespace=NS),
    )
    rows = [
        ("alice_row", w.full_a, {"namespace": NS, "user_id": "alice"}),
        ("bob_row", w.full_a, {"namespace": NS, "user_id": "bob"}),
        ("team_row", w.full_a, {"namespace": NS, "user_id": ""}),
        ("ops_row", w.full_a, {"namespace": "ops", "user_id": "alice"}),
        ("b_row", w.full_b, {"namespace": NS, "user_id": "alice"}),
    ]
    for name, api, scope in rows:
        saved = await api.save(
            f"matrix fact {name}", scope=common_pb2.Scope(**scope), tags=["world"]
        )
        w.ids[name] = saved.memory.id
    # Alice's entity (issue 19): the graph reads look it up.
    await w.full_a.memories.SaveMemory(
        memory_pb2.SaveMemoryRequest(
            scope=common_pb2.Scope(namespace=NS, user_id="alice"),
            memory=common_pb2.MemoryDraft(content="matrix graph fact"),
            graph=graph_pb2.GraphDraft(
                relations=[graph_pb2.RelationDraft(subject=GRAPH_ENTITY, predicate="knows",
                                                   object="Matrix Other")]
            ),
        ),
        metadata=w.full_a.md,
    )  # fmt: skip
    for name, api, scope in [
        ("alice_cand", w.proposer, {"namespace": NS, "user_id": "alice"}),
        ("bob_cand", w.proposer, {"namespace": NS, "user_id": "bob"}),
        ("b_cand", w.full_b, {"namespace": NS, "user_id": "alice"}),
    ]:
        response = await api.review.ProposeMemory(
            review_pb2.ProposeMemoryRequest(
                scope=common_pb2.Scope(**scope),
                memory=common_pb2.MemoryDraft(content=f"matrix candidate {name}", tags=["cand"]),
                reason="matrix",
            ),
            metadata=api.md,
        )
        w.ids[name] = response.candidate.id
    for name, api, scope in [
        ("alice_doc", w.full_a, {"namespace": NS, "user_id": "alice"}),
        ("bob_doc", w.full_a, {"namespace": NS, "user_id": "bob"}),
        ("team_doc", w.full_a, {"namespace": NS, "user_id": ""}),
        ("b_doc", w.full_b, {"namespace": NS, "user_id": "alice"}),
    ]:
        put = await knowledge_pb2_grpc.KnowledgeServiceStub(channel).PutDocument(
            knowledge_pb2.PutDocumentRequest(
                scope=common_pb2.Scope(**scope), collection="world", path=f"{name}.md",
                content=f"# {name}\n\nmatrix document {name}\n",
            ),
            metadata=api.md,
        )  # fmt: skip
        w.ids[name] = put.document.id
    return w


@dataclass
class Call:
    """One RPC invocation for one case."""

    world: World
    case: str
    api: Api
    scope: common_pb2.Scope
    metadata: tuple[tuple[str, str], ...]
    nested_user: str = ""

    @property
    def filter(self) -> common_pb2.MemoryFilter:
        return common_pb2.MemoryFilter(tags=["world"], user_id=self.nested_user)

    async def fresh_row(self) -> str:
        saved = await self.world.full_a.save(
            f"fresh {secrets.token_hex(4)}", scope=common_pb2.Scope(namespace=NS, user_id="alice")
        )
        return saved.memory.id

    async def fresh_document(self) -> str:
        # Its own text: a deleted document's text is kept out of the collection (tombstones).
        token = secrets.token_hex(4)
        put = await knowledge_pb2_grpc.KnowledgeServiceStub(self.world.channel).PutDocument(
            knowledge_pb2.PutDocumentRequest(
                scope=common_pb2.Scope(namespace=NS, user_id="alice"), collection="world",
                path=f"fresh-{token}.md", content=f"# fresh\n\nfresh text {token}\n",
            ),
            metadata=self.world.full_a.md,
        )  # fmt: skip
        return put.document.id

    async def fresh_conflict(self, by: Api) -> str:
        """An open conflict between two of alice's memories, found by ``by``'s write."""
        scope = common_pb2.Scope(namespace=NS, user_id="alice")
        subject = f"matrix service {secrets.token_hex(4)}"
        await by.save(f"The {subject} listens on port 7001", scope=scope)
        saved = await by.save(f"The {subject} now listens on port 7002", scope=scope)
        return saved.conflicts[0].id

    async def fresh_candidate(self, by: Api) -> str:
        response = await by.review.ProposeMemory(
            review_pb2.ProposeMemoryRequest(
                scope=common_pb2.Scope(namespace=NS, user_id="alice"),
                memory=common_pb2.MemoryDraft(content=f"candidate {secrets.token_hex(4)}"),
                reason="matrix",
            ),
            metadata=by.md,
        )
        return response.candidate.id


async def run_rpc(method: str, call: Call) -> tuple[grpc.StatusCode, list[str] | None]:
    """Invoke ``method`` for ``call``; return the status and, for collections, the ids."""
    api, scope, md = call.api, call.scope, call.metadata
    mem, rev = api.memories, api.review
    kb = knowledge_pb2_grpc.KnowledgeServiceStub(api.channel)
    try:
        ids: list[str] | None = None
        match method.rsplit("/", 1)[1]:
            case "SaveMemory":
                await mem.SaveMemory(
                    memory_pb2.SaveMemoryRequest(
                        scope=scope,
                        memory=common_pb2.MemoryDraft(content=f"new {secrets.token_hex(4)}"),
                    ),
                    metadata=md,
                )
            case "GetMemory":
                await mem.GetMemory(
                    memory_pb2.GetMemoryRequest(scope=scope, id=call.world.ids["alice_row"]),
                    metadata=md,
                )
            case "UpdateMemory":
                target = await call.fresh_row()
                await mem.UpdateMemory(
                    memory_pb2.UpdateMemoryRequest(
                        scope=scope,
                        id=target,
                        patch=common_pb2.MemoryDraft(content="changed"),
                        update_mask=FieldMask(paths=["content"]),
                    ),
                    metadata=md,
                )
            case "ForgetMemory":
                target = await call.fresh_row()
                await mem.ForgetMemory(
                    memory_pb2.ForgetMemoryRequest(scope=scope, id=target), metadata=md
                )
            case "SearchMemories":
                r = await mem.SearchMemories(
                    memory_pb2.SearchMemoriesRequest(
                        scope=scope, query="matrix", filter=call.filter
                    ),
                    metadata=md,
                )
                ids = [h.memory.id for h in r.hits]
            case "ListMemories":
                r = await mem.ListMemories(
                    memory_pb2.ListMemoriesRequest(scope=scope, filter=call.filter), metadata=md
                )
                ids = [m.id for m in r.memories]
            case "GetMemoryHistory":
                await mem.GetMemoryHistory(
                    memory_pb2.GetMemoryHistoryRequest(scope=scope, id=call.world.ids["alice_row"]),
                    metadata=md,
                )
            case "ExportMemories":
                stream = mem.ExportMemories(
                    memory_pb2.ExportMemoriesRequest(scope=scope, filter=call.filter), metadata=md
                )
                ids = [item.memory.id async for item in stream]
            case "WatchMemories":
                stream = mem.WatchMemories(
                    memory_pb2.WatchMemoriesRequest(scope=scope, filter=call.filter), metadata=md
                )
                try:  # an admitted stream opens with its position marker; a refused one fails
                    await asyncio.wait_for(stream.read(), timeout=30)
                finally:
                    stream.cancel()
            case "BuildContext":
                r = await mem.BuildContext(
                    memory_pb2.BuildContextRequest(scope=scope, query="matrix", filter=call.filter),
                    metadata=md,
                )
                ids = [item.id for item in r.items]
            case "ProposeMemory":
                await rev.ProposeMemory(
                    review_pb2.ProposeMemoryRequest(
                        scope=scope,
                        memory=common_pb2.MemoryDraft(content=f"idea {secrets.token_hex(4)}"),
                        reason="matrix",
                    ),
                    metadata=md,
                )
            case "ListCandidates":
                r = await rev.ListCandidates(
                    review_pb2.ListCandidatesRequest(scope=scope), metadata=md
                )
                ids = [m.id for m in r.candidates]
            case "ReviewCandidate":
                target = await call.fresh_candidate(call.world.proposer)
                await rev.ReviewCandidate(
                    review_pb2.ReviewCandidateRequest(
                        scope=scope,
                        id=target,
                        decision=review_pb2.REVIEW_DECISION_APPROVE,
                        reason="ok",
                    ),
                    metadata=md,
                )
            case "WithdrawCandidate":
                by = (
                    call.api
                    if call.case in ("confined_own_scope", "full_key")
                    else call.world.confined
                )
                target = await call.fresh_candidate(by)
                await rev.WithdrawCandidate(
                    review_pb2.WithdrawCandidateRequest(scope=scope, id=target), metadata=md
                )
            case "ListConflicts":
                await rev.ListConflicts(review_pb2.ListConflictsRequest(scope=scope), metadata=md)
            case "ResolveConflict":
                target = await call.fresh_conflict(call.world.proposer)
                await rev.ResolveConflict(
                    review_pb2.ResolveConflictRequest(
                        scope=scope, id=target, decision=review_pb2.REVIEW_DECISION_REJECT,
                        reason="ok",
                    ),
                    metadata=md,
                )  # fmt: skip
            case "ConsolidateMemories":
                await rev.ConsolidateMemories(
                    review_pb2.ConsolidateMemoriesRequest(scope=scope, dry_run=True), metadata=md
                )
            case "ListAuditEvents":
                await api.audit.ListAuditEvents(
                    audit_pb2.ListAuditEventsRequest(scope=scope), metadata=md
                )
            case "LookupEntity":
                await graph_pb2_grpc.GraphServiceStub(api.channel).LookupEntity(
                    graph_pb2.LookupEntityRequest(scope=scope, name=GRAPH_ENTITY), metadata=md
                )
            case "ListNeighbours":
                await graph_pb2_grpc.GraphServiceStub(api.channel).ListNeighbours(
                    graph_pb2.ListNeighboursRequest(scope=scope, name=GRAPH_ENTITY), metadata=md
                )
            case "PutDocument":
                await kb.PutDocument(
                    knowledge_pb2.PutDocumentRequest(
                        scope=scope, collection="scratch", path=f"{secrets.token_hex(4)}.md",
                        content="# new\n\nnew text\n",
                    ),
                    metadata=md,
                )  # fmt: skip
            case "PutDocuments":
                await kb.PutDocuments(
                    knowledge_pb2.PutDocumentsRequest(
                        scope=scope, collection="scratch",
                        documents=[knowledge_pb2.PutDocumentsItem(
                            path=f"{secrets.token_hex(4)}.md", content="# new\n\nnew text\n"
                        )],
                    ),
                    metadata=md,
                )  # fmt: skip
            case "GetDocument":
                await kb.GetDocument(
                    knowledge_pb2.GetDocumentRequest(scope=scope, id=call.world.ids["alice_doc"]),
                    metadata=md,
                )
            case "ListDocuments":
                r = await kb.ListDocuments(
                    knowledge_pb2.ListDocumentsRequest(scope=scope, collection="world"),
                    metadata=md,
                )
                ids = [d.id for d in r.documents]
            case "DeleteDocument":
                target = await call.fresh_document()
                await kb.DeleteDocument(
                    knowledge_pb2.DeleteDocumentRequest(scope=scope, id=target), metadata=md
                )
            case "SearchKnowledge":
                r = await kb.SearchKnowledge(
                    knowledge_pb2.SearchKnowledgeRequest(
                        scope=scope, query="matrix document", collections=["world"]
                    ),
                    metadata=md,
                )
                ids = sorted({h.source.document_id for h in r.hits})
            case "WhoAmI":
                stub = identity_pb2_grpc.IdentityServiceStub(api.channel)
                await stub.WhoAmI(identity_pb2.WhoAmIRequest(scope=scope), metadata=md)
            case other:
                raise AssertionError(f"no request builder for {other}")
        return grpc.StatusCode.OK, ids
    except grpc.aio.AioRpcError as err:
        return err.code(), None


def call_for(world: World, method: str, case: str) -> Call:
    own = common_pb2.Scope(namespace=NS, user_id="alice")
    c = world.confined
    match case:
        case "no_key":
            return Call(world, case, c, own, ())
        case "wrong_tenant":
            return Call(world, case, world.full_b, own, world.full_b.md)
        case "confined_own_scope":
            return Call(world, case, c, own, c.md)
        case "other_user":
            return Call(world, case, c, common_pb2.Scope(namespace=NS, user_id="bob"), c.md)
        case "empty_confined_field":
            return Call(world, case, c, common_pb2.Scope(namespace=NS), c.md)
        case "nested_filter_mismatch":
            return Call(world, case, c, own, c.md, nested_user="bob")
        case "missing_permission":
            needed = REQUIRED_PERMISSION[METHOD_CLASSES[method]]
            assert needed is not None
            limited = world.key_without(needed.value)
            return Call(world, case, limited, own, limited.md)
        case "full_key":
            return Call(world, case, world.full_a, common_pb2.Scope(namespace=NS), world.full_a.md)
    raise AssertionError(case)


def test_matrix_covers_every_rpc_and_case() -> None:
    """The data file names every classified RPC and every case, and nothing else."""
    assert set(MATRIX["rpcs"]) == set(METHOD_CLASSES)
    for method, row in MATRIX["rpcs"].items():
        assert set(row) == set(MATRIX["cases"]), method


async def test_authorization_matrix(brain_server: BrainServer, channel: grpc.aio.Channel) -> None:
    """Each RPC answers each caller exactly as the matrix says, down to the visible ids."""
    world = await build_world(brain_server, channel)
    failures = []
    checked = 0
    for method, row in MATRIX["rpcs"].items():
        for case, expected in row.items():
            if expected is None:
                continue
            want = expected if isinstance(expected, str) else expected["status"]
            visible = None if isinstance(expected, str) else expected.get("visible")
            code, ids = await run_rpc(method, call_for(world, method, case))
            checked += 1
            if code.name != want:
                failures.append(f"{method} {case}: {code.name}, expected {want}")
                continue
            if visible is not None:
                assert ids is not None
                names = sorted(n for n in map(world.name_of, ids) if n is not None)
                if names != sorted(visible):
                    failures.append(f"{method} {case}: saw {names}, expected {sorted(visible)}")
    assert not failures, "\n".join(failures)
    assert checked > 100


@pytest.mark.parametrize(
    "method",
    ["GetMemory", "GetMemoryHistory", "UpdateMemory", "ForgetMemory", "ReviewCandidate"],
)
async def test_out_of_scope_id_answers_like_a_random_id(
    brain_server: BrainServer, channel: grpc.aio.Channel, method: str
) -> None:
    """A row of another tenant, user or label gives byte-identical errors to a random id."""
    tenant = unique("t")
    alice = Api(
        channel,
        brain_server.mint_key(tenant, "alice", permissions=FULL, user="alice", namespaces=(NS,)),
        namespace=NS,
        user_id="alice",
    )
    owner = Api(
        channel, brain_server.mint_key(tenant, "owner", permissions=FULL, labels=("team", "hr"))
    )
    stranger = Api(channel, brain_server.mint_key(unique("t"), "s", permissions=FULL))
    bob_row = (
        await owner.save("bob's row", scope=common_pb2.Scope(namespace=NS, user_id="bob"))
    ).memory.id
    hr_row = (
        await owner.save(
            "hr row", scope=common_pb2.Scope(namespace=NS, user_id="alice"), labels=["hr"]
        )
    ).memory.id
    foreign = (await stranger.save("foreign row")).memory.id
    mine = (await alice.save("alice's own row")).memory.id
    random_id = "0190f4c6-0000-7000-8000-000000000000"

    async def attempt(memory_id: str) -> tuple[Any, ...]:
        scope = alice.scope()
        stub: Callable[..., Awaitable[Any]]
        match method:
            case "GetMemory":
                stub, req = (
                    alice.memories.GetMemory,
                    memory_pb2.GetMemoryRequest(scope=scope, id=memory_id),
                )
            case "GetMemoryHistory":
                stub, req = (
                    alice.memories.GetMemoryHistory,
                    memory_pb2.GetMemoryHistoryRequest(scope=scope, id=memory_id),
                )
            case "UpdateMemory":
                stub, req = (
                    alice.memories.UpdateMemory,
                    memory_pb2.UpdateMemoryRequest(
                        scope=scope,
                        id=memory_id,
                        patch=common_pb2.MemoryDraft(content="x"),
                        update_mask=FieldMask(paths=["content"]),
                    ),
                )
            case "ForgetMemory":
                stub, req = (
                    alice.memories.ForgetMemory,
                    memory_pb2.ForgetMemoryRequest(scope=scope, id=memory_id),
                )
            case _:
                stub, req = (
                    alice.review.ReviewCandidate,
                    review_pb2.ReviewCandidateRequest(
                        scope=scope,
                        id=memory_id,
                        decision=review_pb2.REVIEW_DECISION_REJECT,
                        reason="r",
                    ),
                )
        call = stub(req, metadata=alice.md)
        try:
            await call
        except grpc.aio.AioRpcError as err:
            return (err.code(), err.details(), tuple(err.trailing_metadata() or ()))
        return (grpc.StatusCode.OK,)

    baseline = await attempt(random_id)
    assert baseline[0] == grpc.StatusCode.NOT_FOUND
    for hidden in (bob_row, hr_row, foreign):
        assert await attempt(hidden) == baseline
    if method == "ReviewCandidate":  # a reviewable row is another key's visible candidate
        proposed = await owner.review.ProposeMemory(
            review_pb2.ProposeMemoryRequest(
                scope=alice.scope(), memory=common_pb2.MemoryDraft(content="a"), reason="r"
            ),
            metadata=owner.md,
        )
        mine = proposed.candidate.id
    # Positive control: the same call works on a row alice may act on.
    assert (await attempt(mine))[0] == grpc.StatusCode.OK
