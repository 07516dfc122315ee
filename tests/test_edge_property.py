"""Issue 11: a randomized multi-key property test of the visibility rule.

Random sequences of save, update, relabel, supersede, forget, propose and review by keys
with different confinements, labels and permissions run in a fresh tenant; afterwards
every read RPC by every key returns exactly what a small reference model says it may see
(nothing more, nothing less), and every invisible id fails byte-identically to a random
id. The model is the rule in the README: a key sees a memory when its current version
shares a label with the key, lies in the key's confinement and, if it was never admitted,
was proposed by the key or the key may review; every version follows the current one.

Writes are not predicted (their rules belong to other parts of the brain); the model
follows what the server answered, and only checks that a write never succeeds on a memory
the writer could not see, and fails on one like on a random id.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import grpc
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from brain.authz import Confinement, parse_permissions
from brain.server.storage import admin
from brain.v1 import common_pb2, memory_pb2, review_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings
from .edge import RANDOM_ID, first_event, get_call, history_call, outcome, watch_replay
from .helpers import Api

NS = "prop"
PROPOSALS = ("candidate", "rejected", "withdrawn")
STATUS = {
    common_pb2.MEMORY_STATUS_ACTIVE: "active",
    common_pb2.MEMORY_STATUS_CANDIDATE: "candidate",
    common_pb2.MEMORY_STATUS_SUPERSEDED: "superseded",
    common_pb2.MEMORY_STATUS_RETRACTED: "retracted",
    common_pb2.MEMORY_STATUS_REJECTED: "rejected",
    common_pb2.MEMORY_STATUS_WITHDRAWN: "withdrawn",
}
LABEL_SETS = (("team",), ("secret",), ("team", "secret"))
WRITE_ERRORS = {
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.FAILED_PRECONDITION,
}


@dataclass(frozen=True)
class KeySpec:
    permissions: str
    labels: tuple[str, ...]
    user: str | None = None

    @property
    def may_review(self) -> bool:
        return "memories:review" in self.permissions


KEYS = {
    "admin": KeySpec(
        "memories:read,memories:write,memories:forget,memories:propose,memories:review",
        ("team", "secret"),
    ),
    "teamer": KeySpec("memories:read,memories:write,memories:forget,memories:propose", ("team",)),
    "alice": KeySpec(
        "memories:read,memories:write,memories:forget,memories:propose", ("team",), user="alice"
    ),
    "bob": KeySpec("memories:read,memories:propose", ("team", "secret"), user="bob"),
    "rev": KeySpec("memories:read,memories:review", ("secret",)),
}


@dataclass
class Row:
    """The model of one memory: its current version's visibility-relevant fields."""

    user: str
    labels: frozenset[str]
    status: str
    created_by: str
    versions: int = 1
    superseded_by: set[str] = field(default_factory=set)


@dataclass
class Model:
    rows: dict[str, Row] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def add(self, memory: common_pb2.Memory, user: str, created_by: str) -> None:
        self.rows[memory.id] = Row(
            user, frozenset(memory.labels), STATUS[memory.status], created_by, memory.version
        )
        self.order.append(memory.id)

    def target(self, index: int) -> str | None:
        return self.order[index % len(self.order)] if self.order else None


def may_see(name: str, row: Row) -> bool:
    key = KEYS[name]
    return (
        bool(row.labels & set(key.labels))
        and (key.user is None or row.user in ("", key.user))
        and (row.status not in PROPOSALS or row.created_by == name or key.may_review)
    )


# Every example starts from memories in each bucket, label and proposal state.
PREAMBLE = (
    ("save", "admin", "", ("team",)),
    ("save", "admin", "bob", ("secret",)),
    ("save", "teamer", "", "own"),
    ("save", "alice", "", "own"),
    ("propose", "bob", "", ("secret",)),
    ("propose", "teamer", "", "own"),
)
# admin twice: it may do everything, so more of the random writes go through.
actors = st.sampled_from(["admin", *sorted(KEYS)])
users = st.sampled_from(["", "alice", "bob"])
# "own": the acting key's labels, so that most creations go through.
# (): none named, so a save takes the key's default and a supersede its target's labels.
label_sets = st.sampled_from(["own", "own", (), *LABEL_SETS])
targets = st.integers(0, 20)
operations = st.one_of(
    st.tuples(st.just("save"), actors, users, label_sets),
    st.tuples(st.just("propose"), actors, users, label_sets),
    st.tuples(st.just("update"), actors, targets),
    st.tuples(st.just("relabel"), actors, targets, label_sets),
    st.tuples(st.just("forget"), actors, targets),
    st.tuples(st.just("review"), actors, targets, st.booleans()),
    st.tuples(st.just("supersede"), actors, targets, users, label_sets),
)


class Scenario:
    """Runs operations against the server and keeps the model in step with its answers."""

    def __init__(self, apis: dict[str, Api], start: str) -> None:
        self.apis = apis
        self.start = start  # the Watch cursor before the tenant's first event
        self.model = Model()
        self.texts = 0
        self.outcomes: list[str] = []  # "<operation>: <status>", for hypothesis statistics

    def text(self) -> str:
        self.texts += 1
        return f"zebra note {self.texts} {secrets.token_hex(3)}"

    def api(self, name: str, user: str = "") -> Api:
        base = self.apis[name]
        return Api(base.channel, base.key, NS, KEYS[name].user or user)

    async def run(self, op: tuple[Any, ...]) -> None:
        kind, name = op[0], op[1]
        if kind in ("save", "propose"):
            await self.create(kind, name, op[2], op[3], supersedes=None)
            return
        target = self.model.target(op[2])
        if target is None:
            return
        if kind == "supersede":
            await self.create("save", name, op[3], op[4], supersedes=target)
            return
        api, row = self.api(name), self.model.rows[target]
        call: Any
        if kind == "update":
            call = api.update(target, ["content"], content=self.text())
        elif kind == "relabel":
            labels = KEYS[name].labels if op[3] == "own" else op[3]
            call = api.update(target, ["labels"], labels=list(labels))
        elif kind == "forget":
            call = api.forget(target)
        else:
            decision = (
                review_pb2.REVIEW_DECISION_APPROVE if op[3] else review_pb2.REVIEW_DECISION_REJECT
            )
            call = api.review.ReviewCandidate(
                review_pb2.ReviewCandidateRequest(
                    scope=api.scope(), id=target, decision=decision, reason="checked"
                ),
                metadata=api.md,
            )
        visible = may_see(name, row)
        result = await outcome(call)
        self.outcomes.append(f"{kind}: {result[0].name}")
        if result[0] != grpc.StatusCode.OK:
            assert result[0] in WRITE_ERRORS, (op, result)
            assert visible or result[0] != grpc.StatusCode.FAILED_PRECONDITION, (op, result)
            if not visible and result[0] == grpc.StatusCode.NOT_FOUND:
                assert result == await outcome(self.same_call_on_random_id(kind, name, op)), op
            return
        assert visible, f"{op} succeeded on a memory its key cannot see"
        if kind == "forget":
            if row.status != "retracted":
                row.status, row.versions = "retracted", row.versions + 1
                # What it had superseded is reopened as a candidate for review (issue 30):
                # its author's and reviewers' to see, no longer its other readers'.
                for other in self.model.rows.values():
                    if other.status == "superseded" and target in other.superseded_by:
                        other.superseded_by.discard(target)
                        other.status, other.versions = "candidate", other.versions + 1
            return
        memory = result[1] if kind in ("update", "relabel") else result[1].memory
        row.status, row.labels = STATUS[memory.status], frozenset(memory.labels)
        row.versions = memory.version

    def same_call_on_random_id(self, kind: str, name: str, op: tuple[Any, ...]) -> Any:
        api = self.api(name)
        if kind in ("update", "relabel"):
            return api.update(RANDOM_ID, ["content"], content=self.text())
        if kind == "forget":
            return api.forget(RANDOM_ID)
        return api.review.ReviewCandidate(
            review_pb2.ReviewCandidateRequest(
                scope=api.scope(),
                id=RANDOM_ID,
                decision=review_pb2.REVIEW_DECISION_APPROVE
                if op[3]
                else review_pb2.REVIEW_DECISION_REJECT,
                reason="checked",
            ),
            metadata=api.md,
        )

    async def create(
        self,
        kind: str,
        name: str,
        user: str,
        labels: tuple[str, ...] | str,
        supersedes: str | None,
    ) -> None:
        if labels == "own":
            labels = KEYS[name].labels
        api = self.api(name, user)
        draft = common_pb2.MemoryDraft(content=self.text(), labels=list(labels))
        if kind == "propose":
            call: Any = api.review.ProposeMemory(
                review_pb2.ProposeMemoryRequest(scope=api.scope(), memory=draft, reason="why"),
                metadata=api.md,
            )
        else:
            call = api.memories.SaveMemory(
                memory_pb2.SaveMemoryRequest(
                    scope=api.scope(), memory=draft, supersedes=[supersedes] if supersedes else []
                ),
                metadata=api.md,
            )
        result = await outcome(call)
        self.outcomes.append(f"{kind if supersedes is None else 'supersede'}: {result[0].name}")
        target = self.model.rows[supersedes] if supersedes is not None else None
        # A successor reaches every reader of what it replaces: a bucket at least as wide,
        # and every label of the target (unnamed labels are the target's own).
        reaches = target is not None and (
            api.user_id in ("", target.user) and set(labels or target.labels) >= target.labels
        )
        if result[0] != grpc.StatusCode.OK:
            assert result[0] in WRITE_ERRORS, (kind, name, result)
            if target is not None and not may_see(name, target):
                assert result[0] in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED)
            if target is not None and "its readers would not see" in result[1]:
                assert not reaches, (name, result)
            return
        held = set(KEYS[name].labels) | (target.labels if target is not None else set())
        assert set(labels) <= held
        memory = result[1].candidate if kind == "propose" else result[1].memory
        self.model.add(memory, api.user_id, name)
        if target is not None:
            assert reaches and set(memory.labels) >= target.labels, (name, memory)
            assert may_see(name, target) and target.status == "active"
            target.status, target.versions = "superseded", target.versions + 1
            target.superseded_by.add(memory.id)

    async def check_reads(self, name: str, sentinel: str) -> None:
        """Every read RPC of key ``name`` returns exactly what the model allows."""
        api = self.api(name)
        rows = self.model.rows
        seen = {i for i, row in rows.items() if may_see(name, row)}
        active = {i for i in seen if rows[i].status == "active"}
        versions = {(i, v) for i in seen for v in range(1, rows[i].versions + 1)}

        random_get = await outcome(get_call(api, RANDOM_ID))
        random_history = await outcome(history_call(api, RANDOM_ID))
        ids = list(rows)
        gets = await asyncio.gather(*(outcome(get_call(api, i)) for i in ids))
        histories = await asyncio.gather(*(outcome(history_call(api, i)) for i in ids))
        for memory_id, got, history in zip(ids, gets, histories, strict=True):
            row = rows[memory_id]
            if memory_id in seen:
                assert got[0] == grpc.StatusCode.OK, (name, memory_id, got)
                assert STATUS[got[1].memory.status] == row.status
                assert [v.version for v in history[1].versions] == list(range(1, row.versions + 1))
            else:
                assert got == random_get, (name, memory_id)
                assert history == random_history, (name, memory_id)

        listed = {m.id for m in await api.list_all(page_size=100)}
        assert listed == active, (name, "list")
        assert set(await api.search("zebra", limit=100)) == active, (name, "search")
        context = await api.memories.BuildContext(
            memory_pb2.BuildContextRequest(
                scope=api.scope(), query="zebra", token_budget=32_000, max_memories=100
            ),
            metadata=api.md,
        )
        assert {i.id for i in context.items} == active, (name, "context")
        pending = await api.review.ListCandidates(
            review_pb2.ListCandidatesRequest(scope=api.scope(), page_size=100), metadata=api.md
        )
        candidates = {i for i in seen if rows[i].status == "candidate"}
        assert {m.id for m in pending.candidates} == candidates, (name, "candidates")
        exported = await api.export(include_history=True)
        assert {(e.memory.id, e.memory.version) for e in exported} == versions, (name, "export")
        assert await watch_replay(api, sentinel, self.start) == versions, (name, "watch")


@pytest.fixture(scope="module")
def lexical_servers(
    pg_cluster: PgCluster, loop_thread: LoopThread
) -> Iterator[dict[str, BrainServer]]:
    """Two lexical-only servers (no embedding cost per write and query): one with the
    application's predicate, one relying on row-level security alone."""
    servers = {
        name: BrainServer(
            cluster=pg_cluster,
            loop=loop_thread,
            settings=server_settings(pg_cluster, embedder="none", app_filter=name == "app-filter"),
        )
        for name in ("app-filter", "rls-only")
    }
    for server in servers.values():
        server.start()
    yield servers
    for server in servers.values():
        server.stop()


@settings(
    max_examples=12,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    ops=st.lists(operations, min_size=1, max_size=6),
    wall=st.sampled_from(["app-filter", "rls-only"]),
)
# Found by a CI run: forgetting the memory that superseded another reopens that one as a
# candidate, which the model did not know.
@example(ops=[("supersede", "admin", 0, "", "own"), ("forget", "admin", 6)], wall="app-filter")
def test_every_read_returns_exactly_what_the_model_allows(
    lexical_servers: dict[str, BrainServer], ops: list[tuple[Any, ...]], wall: str
) -> None:
    """After random writes by five differently confined, labelled and permitted keys, every
    read RPC of every key matches the reference model, invisible ids like a random id; with
    the application's predicate and with row-level security alone."""
    server = lexical_servers[wall]
    tenant = f"prop-{secrets.token_hex(5)}"

    async def scenario() -> list[str]:
        keys = await mint_keys(server, tenant)
        async with grpc.aio.insecure_channel(server.target) as channel:
            s = Scenario(
                {name: Api(channel, key, NS) for name, key in keys.items()},
                first_event(server.cluster.pepper),
            )
            for op in (*PREAMBLE, *ops):
                await s.run(op)
            # Written last and visible to every key: a Watch replay is complete once it arrives.
            await s.create("save", "admin", "", ("team", "secret"), supersedes=None)
            sentinel = s.model.order[-1]
            await asyncio.gather(*(s.check_reads(name, sentinel) for name in KEYS))
            return s.outcomes[len(PREAMBLE) : -1]  # the random operations

    for outcome_seen in set(server.loop.run(scenario())):
        event(outcome_seen)


async def mint_keys(server: BrainServer, tenant: str) -> dict[str, str]:
    """A fresh tenant and one key per spec, minted on one owner connection."""
    conn = await asyncpg.connect(server.cluster.owner_dsn)
    try:
        async with conn.transaction():
            await admin.create_tenant(conn, tenant)
            keys = {}
            for name, spec in KEYS.items():
                minted = await admin.mint_key(
                    conn,
                    server.cluster.pepper,
                    tenant=tenant,
                    principal=name,
                    permissions=parse_permissions(spec.permissions),
                    confinement=Confinement(user_id=spec.user),
                    labels=frozenset(spec.labels),
                    expires_at=None,
                )
                keys[name] = minted.key
        return keys
    finally:
        await conn.close()
