"""The world of the property walls test (issue 32): the keys, the reference model of what
each may see and act on, and a builder that writes random worlds through the API while the
model follows (tests/test_edge_property_walls.py checks every key against it).

The model is the README's rule, written down without the server's help: a key sees an
object when it shares a label with it, lies in the key's confinement (a user sees the
team-shared rows and its own, a session the user's session-less rows and its own) and, for
a proposal, proposed it or may review; an entity when an active memory it sees asserts it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import grpc
from hypothesis import strategies as st

from brain.authz import Confinement, parse_permissions
from brain.server.storage import admin
from brain.v1 import (
    common_pb2,
    graph_pb2,
    knowledge_pb2,
    knowledge_pb2_grpc,
    memory_pb2,
    review_pb2,
)

from .conftest import BrainServer
from .edge import outcome
from .helpers import Api
from .test_edge_property import STATUS

READ, WRITE, PROPOSE, REVIEW, FORGET = (
    "memories:read",
    "memories:write",
    "memories:propose",
    "memories:review",
    "memories:forget",
)
AUDIT, CHAIN = "audit:read", "audit:chain"
KREAD, KWRITE, KDELETE = "knowledge:read", "knowledge:write", "knowledge:delete"
PROPOSALS = ("candidate", "rejected", "withdrawn")
HOME, AWAY = "home", "away"
COLLECTION = "kb"
NEVER_USED = "Never Used Name"
REVIEWED = "ns2"  # a review-required namespace of the home tenant
# The permission each id-taking call of the checks needs (authz/_permissions.py).
NEEDS = {
    "get": READ, "history": READ, "lookup": READ, "neighbours": READ,
    "update": WRITE, "supersede": WRITE, "supersede_reviewed": WRITE,
    "propose_supersede": PROPOSE, "withdraw": PROPOSE, "forget": FORGET, "review": REVIEW,
    "get_document": KREAD, "delete_document": KDELETE, "audit": AUDIT,
}  # fmt: skip


@dataclass(frozen=True)
class KeySpec:
    permissions: frozenset[str]
    labels: frozenset[str]
    user: str | None = None
    namespace: str | None = None
    session: str | None = None
    tenant: str = HOME

    def has(self, permission: str) -> bool:
        return permission in self.permissions

    @property
    def confined(self) -> bool:
        return (self.user, self.namespace, self.session) != (None, None, None)

    @property
    def chain(self) -> bool:
        return self.has(CHAIN) and not self.confined


def key(perms: str, labels: str = "team", **confinement: str) -> KeySpec:
    return KeySpec(frozenset(perms.split(",")), frozenset(labels.split(",")), **confinement)


EVERYTHING = (
    f"{READ},{WRITE},{PROPOSE},{REVIEW},{FORGET},{AUDIT},{CHAIN},{KREAD},{KWRITE},{KDELETE}"
)
KEYS: dict[str, KeySpec] = {
    # A tenant-wide auditor holding everything: it builds most of the world.
    "root": key(EVERYTHING, "team,secret"),
    # Unconfined, team label only, audit without the chain.
    "auditor": key(f"{READ},{KREAD},{AUDIT}"),
    "nsk": key(f"{READ},{KREAD},{AUDIT}", "team,secret", namespace="ns1"),
    "alice": key(
        f"{READ},{WRITE},{FORGET},{PROPOSE},{KREAD},{KWRITE},{KDELETE},{AUDIT}", user="alice"
    ),
    "sess": key(f"{READ},{KREAD},{AUDIT}", "team,secret", user="alice", session="s1"),
    "secret": key(f"{READ},{KREAD},{PROPOSE}", "secret"),
    "rev": key(f"{READ},{REVIEW}", "team,secret"),
    "writer": key(f"{WRITE},{KWRITE}", user="alice"),
    "forgetter": key(f"{FORGET},{KDELETE}", user="alice"),
    "proposer": key(PROPOSE, "team,secret", user="alice"),
    "reviewer": key(REVIEW),
    # Confined to a session of any user; and an auditor that reads nothing else.
    "s1": key(f"{READ},{WRITE},{KREAD},{AUDIT}", session="s1"),
    "auditonly": key(AUDIT, "secret", namespace="ns2"),
    "other": KeySpec(frozenset(EVERYTHING.split(",")), frozenset({"team", "secret"}), tenant=AWAY),
}
READERS = [name for name, k in KEYS.items() if k.has(READ)]


@dataclass
class Obj:
    """The model of one memory or document: what visibility and write power depend on."""

    id: str
    kind: str  # "memory" | "document"
    tenant: str
    namespace: str
    user: str
    session: str
    labels: frozenset[str]
    status: str  # a memory status; a document's "active" or "deleted"
    created_by: str
    versions: int = 1
    entities: tuple[str, ...] = ()  # names a memory asserts (relation ends included)
    relations: tuple[tuple[str, str], ...] = ()  # (subject, object), predicate "knows"
    path: str = ""  # a document's path in its collection
    text: str = ""  # a memory's current content (its last, for a forgotten one)
    aliases: tuple[str, ...] = ()  # the alias a memory gives each of its entities
    supersedes: list[str] = field(default_factory=list)
    superseded_by: list[str] = field(default_factory=list)
    sentinel: bool = False


def sees(name: str, obj: Obj) -> bool:
    """The README's visibility rule for key ``name`` (its request scope is its confinement)."""
    k = KEYS[name]
    return (
        obj.tenant == k.tenant
        and bool(obj.labels & k.labels)
        and (k.namespace is None or obj.namespace == k.namespace)
        and (k.user is None or obj.user in ("", k.user))
        and (k.session is None or obj.session in ("", k.session))
        and (
            obj.kind == "document"
            or obj.status not in PROPOSALS
            or obj.created_by == name
            or k.has(REVIEW)
        )
    )


def writable(name: str, obj: Obj) -> bool:
    """Write power follows write scope: a user (session) key changes only its own rows."""
    k = KEYS[name]
    return (k.user is None or obj.user == k.user) and (
        k.session is None or obj.session == k.session
    )


def acts(name: str, obj: Obj) -> bool:
    return sees(name, obj) and writable(name, obj)


def gated(name: str, namespace: str) -> bool:
    """A content change by ``name`` in ``namespace`` becomes a proposal (or is refused)."""
    return namespace == REVIEWED and not KEYS[name].has(REVIEW)


def acts_directly(name: str, obj: Obj) -> bool:
    return acts(name, obj) and not gated(name, obj.namespace)


# --- the random world ---------------------------------------------------------------

NAMES = ("Ada", "Bix", "Cyd")
LABEL_SETS = (("team",), ("secret",), ("team", "secret"))
MEMORY_STATES = (
    "active",
    "updated",
    "relabelled",
    "retracted",
    "superseded",
    "candidate",
    "approved",
    "rejected",
    "withdrawn",
)
memory_specs = st.tuples(
    st.sampled_from(["ns1", "ns2"]),
    st.sampled_from(["", "alice", "bob"]),
    st.sampled_from(["", "s1", "s2"]),
    st.sampled_from(LABEL_SETS),
    st.sampled_from(MEMORY_STATES),
    st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
    st.sampled_from(["root", "alice", "secret", "proposer"]),  # who proposes, for proposals
)
document_specs = st.tuples(
    st.sampled_from(["ns1", "ns2"]),
    st.sampled_from(["", "alice", "bob"]),
    st.sampled_from(["", "s1"]),
    st.sampled_from(LABEL_SETS),
    st.sampled_from(["active", "updated", "relabelled", "deleted"]),
)
Bucket = tuple[str, str, str]


class World:
    """Builds the world through the API and keeps the model in step with what it asked for."""

    def __init__(self, apis: dict[str, Api]) -> None:
        self.apis = apis
        self.objects: dict[str, Obj] = {}
        self.counter = 0
        self.token = secrets.token_hex(3)
        self.doc_probes: list[Obj] = []  # documents the write-only key puts at the path of
        self.same_text_probes: list[Obj] = []  # and a reader puts their exact text at

    def text(self, what: str) -> str:
        self.counter += 1
        return f"zebra quokka {what} {self.counter} {self.token}"

    def api(self, name: str, bucket: Bucket | None = None) -> Api:
        """Key ``name`` with its reading scope (its confinement), or writing into ``bucket``."""
        k, base = KEYS[name], self.apis[name]
        if bucket is None:
            return Api(base.channel, base.key, k.namespace or "", k.user or "", k.session or "")
        return Api(base.channel, base.key, *bucket)

    def memories_of(self, tenant: str) -> list[Obj]:
        return [o for o in self.objects.values() if o.kind == "memory" and o.tenant == tenant]

    @staticmethod
    def graph(entities: tuple[str, ...], aliases: tuple[str, ...]) -> graph_pb2.GraphDraft:
        draft = graph_pb2.GraphDraft()
        for name, alias in zip(entities, aliases, strict=True):
            draft.entities.add(name=name, aliases=[alias])
        if len(entities) == 2:
            draft.relations.add(
                subject=entities[0],
                predicate="knows",
                object=entities[1],
                cardinality=graph_pb2.CARDINALITY_MANY,
            )
        return draft

    def remember(
        self,
        memory: common_pb2.Memory,
        name: str,
        bucket: Bucket,
        entities: tuple[str, ...],
        text: str,
        aliases: tuple[str, ...] = (),
    ) -> Obj:
        obj = Obj(
            memory.id,
            "memory",
            KEYS[name].tenant,
            *bucket,
            frozenset(memory.labels),
            STATUS[memory.status],
            name,
            memory.version,
            entities,
            ((entities[0], entities[1]),) if len(entities) == 2 else (),
            text=text,
            aliases=aliases,
        )
        assert obj.labels, "a creator sees the labels it granted"
        self.objects[obj.id] = obj
        return obj

    async def save(
        self,
        name: str,
        bucket: Bucket,
        labels: tuple[str, ...],
        entities: tuple[str, ...] = (),
        supersedes: Obj | None = None,
    ) -> Obj:
        api = self.api(name, bucket)
        text = self.text("note")
        aliases = tuple(f"{e} aka {self.counter}" for e in entities)  # this memory's own
        response = await api.memories.SaveMemory(
            memory_pb2.SaveMemoryRequest(
                scope=api.scope(),
                memory=common_pb2.MemoryDraft(content=text, labels=list(labels)),
                supersedes=[supersedes.id] if supersedes else [],
                graph=self.graph(entities, aliases),
            ),
            metadata=api.md,
        )
        memory = response.memory
        if not KEYS[name].has(READ):  # a receipt: the labels it asked for
            memory.labels[:] = list(labels)
        if gated(name, bucket[0]):
            assert response.outcome == memory_pb2.SAVE_OUTCOME_PROPOSED, (name, bucket)
            new = self.remember(memory, name, bucket, entities, text, aliases)  # the targets stay
            new.supersedes = [supersedes.id] if supersedes else []
            return new
        assert response.outcome == memory_pb2.SAVE_OUTCOME_CREATED, (name, bucket)
        new = self.remember(memory, name, bucket, entities, text, aliases)
        if supersedes is not None:
            supersedes.status, supersedes.versions = "superseded", supersedes.versions + 1
            supersedes.superseded_by.append(new.id)
            new.supersedes = [supersedes.id]
        return new

    async def propose(
        self, name: str, bucket: Bucket, labels: tuple[str, ...], entities: tuple[str, ...]
    ) -> Obj:
        api = self.api(name, bucket)
        text = self.text("idea")
        aliases = tuple(f"{e} aka {self.counter}" for e in entities)
        response = await api.review.ProposeMemory(
            review_pb2.ProposeMemoryRequest(
                scope=api.scope(),
                memory=common_pb2.MemoryDraft(content=text, labels=list(labels)),
                reason="why not",
                graph=self.graph(entities, aliases),
            ),
            metadata=api.md,
        )
        memory = response.candidate
        if not KEYS[name].has(READ):
            memory.labels[:] = list(labels)
        return self.remember(memory, name, bucket, entities, text, aliases)

    def follow(self, obj: Obj, memory: common_pb2.Memory, name: str = "") -> None:
        """The model follows the answer; a key without memories:read got a receipt."""
        obj.status, obj.versions = STATUS[memory.status], memory.version
        if name and not KEYS[name].has(READ):
            assert (memory.content, list(memory.tags), memory.id) == ("", [], obj.id), memory

    async def update(self, name: str, obj: Obj) -> None:
        api = self.api(name)
        obj.text = self.text("changed")
        self.follow(obj, await api.update(obj.id, ["content"], content=obj.text), name)

    async def forget(self, name: str, obj: Obj) -> None:
        await self.api(name).forget(obj.id)
        obj.status, obj.versions = "retracted", obj.versions + 1

    async def review(self, name: str, obj: Obj, approve: bool) -> None:
        api = self.api(name)
        decision = (
            review_pb2.REVIEW_DECISION_APPROVE if approve else review_pb2.REVIEW_DECISION_REJECT
        )
        response = await api.review.ReviewCandidate(
            review_pb2.ReviewCandidateRequest(
                scope=api.scope(), id=obj.id, decision=decision, reason="checked"
            ),
            metadata=api.md,
        )
        self.follow(obj, response.memory, name)

    async def withdraw(self, name: str, obj: Obj) -> None:
        api = self.api(name)
        response = await api.review.WithdrawCandidate(
            review_pb2.WithdrawCandidateRequest(scope=api.scope(), id=obj.id, reason="no"),
            metadata=api.md,
        )
        self.follow(obj, response.memory)

    async def memory(self, spec: tuple[Any, ...]) -> None:
        """One random memory, brought to its state by the least-privileged key that may."""
        ns, user, session, labels, state, entities, proposer = spec
        bucket: Bucket = (ns, user, session)
        names = tuple(entities)
        if state in ("candidate", "approved", "rejected", "withdrawn"):
            k = KEYS[proposer]
            bucket = (ns, k.user if k.user is not None else user, session)
            labels = tuple(sorted(set(labels) & k.labels)) or tuple(sorted(k.labels))
            obj = await self.propose(proposer, bucket, labels, names)
            if state == "approved":
                await self.review("reviewer" if sees("reviewer", obj) else "rev", obj, True)
            elif state == "rejected":
                await self.review("rev", obj, False)
            elif state == "withdrawn":
                await self.withdraw(proposer, obj)
            return
        obj = await self.save("root", bucket, labels, names)
        if state == "updated":
            await self.update("writer" if acts_directly("writer", obj) else "root", obj)
        elif state == "retracted":
            await self.forget("forgetter" if acts("forgetter", obj) else "root", obj)
        elif state == "relabelled":  # every version follows the current labels
            relabelled = LABEL_SETS[(LABEL_SETS.index(labels) + 1) % len(LABEL_SETS)]
            got = await self.api("root").update(obj.id, ["labels"], labels=list(relabelled))
            self.follow(obj, got)
            obj.labels = frozenset(got.labels)
        elif state == "superseded":
            by = "writer" if acts_directly("writer", obj) else "root"
            # A successor keeps every label of what it replaces (also one its writer does
            # not hold), so it reaches all of that memory's readers. root's adds others: a
            # reader of the successor may not see what it replaced, and the link between
            # them must be cut for it.
            kept = labels
            if by == "root":
                added = LABEL_SETS[(LABEL_SETS.index(labels) + 1) % len(LABEL_SETS)]
                kept = tuple(sorted(set(labels) | set(added)))
            await self.save(by, bucket, kept, names, supersedes=obj)

    async def probe_text(self, obj: Obj) -> None:
        """Saving a memory's exact text into its bucket: a reader that sees it gets it back
        (deduplicated), one that does not gets a new memory; a key without memories:read
        always gets a new one. A forgotten or rejected value is refused only to keys that
        see the memory whose erasure left the tombstone (write-only keys whose scope and
        labels cover it included, by decision); to any other key it is a new value."""
        bucket: Bucket = (obj.namespace, obj.user, obj.session)
        if obj.tenant != HOME or obj.user != "alice" or gated("writer", obj.namespace):
            return
        for name in ("alice", "writer"):
            api = self.api(name, bucket)
            got = await outcome(
                api.memories.SaveMemory(
                    memory_pb2.SaveMemoryRequest(
                        scope=api.scope(), memory=common_pb2.MemoryDraft(content=obj.text)
                    ),
                    metadata=api.md,
                )
            )
            if obj.status in ("retracted", "rejected") and sees(name, obj):
                assert got[0] == grpc.StatusCode.FAILED_PRECONDITION, (name, obj, got)
                assert "tombstone" in got[1], got
                continue
            assert got[0] == grpc.StatusCode.OK, (name, obj, got)
            same = obj.status == "active" and sees(name, obj) and KEYS[name].has(READ)
            if same:
                assert got[1].outcome == memory_pb2.SAVE_OUTCOME_DEDUPLICATED, (name, obj)
                assert got[1].memory.id == obj.id
                continue
            assert got[1].outcome == memory_pb2.SAVE_OUTCOME_CREATED, (name, obj, got[1])
            memory = got[1].memory
            memory.labels[:] = ["team"]  # the default label, also for a receipt
            self.remember(memory, name, bucket, (), obj.text)

    # -- documents

    def kb(self, name: str, bucket: Bucket | None = None) -> tuple[Api, Any]:
        api = self.api(name, bucket)
        return api, knowledge_pb2_grpc.KnowledgeServiceStub(api.channel)

    async def put(
        self,
        name: str,
        bucket: Bucket,
        path: str,
        labels: tuple[str, ...] = (),
        content: str = "",
    ) -> knowledge_pb2.PutDocumentResponse:
        api, stub = self.kb(name, bucket)
        content = content or f"# Doc {path}\n\n{self.text('doc')}\n"
        put = await stub.PutDocument(
            knowledge_pb2.PutDocumentRequest(
                scope=api.scope(),
                collection=COLLECTION,
                path=path,
                content=content,
                labels=list(labels),
            ),
            metadata=api.md,
        )
        if not KEYS[name].has(KREAD):  # a receipt: neither the creator nor the labels
            assert (put.document.created_by, list(put.document.labels)) == ("", []), put
        return put

    async def document(
        self, name: str, bucket: Bucket, labels: tuple[str, ...], sentinel: bool = False
    ) -> Obj:
        path = f"d{self.counter}.md"
        content = f"# Doc {path}\n\n{self.text('doc')}\n"
        put = await self.put(name, bucket, path, labels, content)
        assert put.outcome == knowledge_pb2.PUT_OUTCOME_CREATED
        d = put.document
        obj = Obj(
            d.id,
            "document",
            KEYS[name].tenant,
            *bucket,
            frozenset(labels),
            "active",
            name,
            d.version,
            path=path,
            text=content,
            sentinel=sentinel,
        )
        self.objects[obj.id] = obj
        return obj

    async def delete(self, name: str, obj: Obj) -> None:
        api, stub = self.kb(name)
        done = await stub.DeleteDocument(
            knowledge_pb2.DeleteDocumentRequest(scope=api.scope(), id=obj.id), metadata=api.md
        )
        obj.status, obj.versions = "deleted", done.version

    async def document_spec(self, spec: tuple[Any, ...]) -> None:
        ns, user, session, labels, state = spec
        obj = await self.document("root", (ns, user, session), labels)
        if state == "updated":
            who = "writer" if acts_directly("writer", obj) else "root"
            put = await self.put(who, (obj.namespace, obj.user, obj.session), obj.path)
            assert (put.document.id, put.outcome) == (obj.id, knowledge_pb2.PUT_OUTCOME_UPDATED)
            obj.versions = put.document.version
        elif state == "relabelled":  # a new version, and new labels on every version
            relabelled = LABEL_SETS[(LABEL_SETS.index(labels) + 1) % len(LABEL_SETS)]
            bucket = (obj.namespace, obj.user, obj.session)
            put = await self.put("root", bucket, obj.path, relabelled)
            assert (put.document.id, put.document.version) == (obj.id, 2)
            obj.versions, obj.labels = 2, frozenset(relabelled)
        elif state == "deleted":
            await self.delete("forgetter" if acts("forgetter", obj) else "root", obj)

    async def probe_same_text(self, obj: Obj) -> None:
        """A reader puts a document's exact text at its path: a document it sees is
        UNCHANGED; one it cannot see is no guess confirmed: a new document, version 1."""
        bucket: Bucket = (obj.namespace, obj.user, obj.session)
        put = await self.put("alice", bucket, obj.path, content=obj.text)
        if sees("alice", obj):
            assert (put.outcome, put.document.id, put.document.version) == (
                knowledge_pb2.PUT_OUTCOME_UNCHANGED, obj.id, obj.versions,
            )  # fmt: skip
            return
        assert (put.outcome, put.document.version) == (knowledge_pb2.PUT_OUTCOME_CREATED, 1)
        assert put.document.id != obj.id
        new = Obj(put.document.id, "document", HOME, *bucket, frozenset({"team"}), "active",
                  "alice", 1, path=obj.path, text=obj.text)  # fmt: skip
        self.objects[new.id] = new

    async def probe_path(self, obj: Obj) -> None:
        """The write-only key puts at a document's path in alice's bucket: a document it
        sees gets a new version; one it cannot see answers as a path never used (a new
        document, version 1): the path tells nothing about what the key cannot read."""
        if obj.user != "alice" or obj.status != "active" or gated("writer", obj.namespace):
            return
        bucket: Bucket = (obj.namespace, obj.user, obj.session)
        put = await self.put("writer", bucket, obj.path)
        if sees("writer", obj):
            assert (put.outcome, put.document.id) == (knowledge_pb2.PUT_OUTCOME_UPDATED, obj.id)
            obj.versions = put.document.version
            return
        path = f"fresh-{self.counter}.md"
        fresh = await self.put("writer", bucket, path)
        assert (
            (put.outcome, put.document.version)
            == (fresh.outcome, fresh.document.version)
            == (knowledge_pb2.PUT_OUTCOME_CREATED, 1)
        )
        assert put.document.id != obj.id
        for created, at in ((put, obj.path), (fresh, path)):
            new = Obj(
                created.document.id,
                "document",
                HOME,
                *bucket,
                frozenset({"team"}),
                "active",
                "writer",
                1,
                path=at,
            )
            self.objects[new.id] = new


# Fixed objects every example starts with: each key kind acts on (and sees) its own.
async def preamble(w: World) -> None:
    team, secret = ("team",), ("secret",)
    mine = await w.save("root", ("ns1", "alice", ""), team, ("Ada",))
    await w.update("writer", mine)  # write-only key, inside its write power (control)
    gone = await w.save("root", ("ns1", "alice", ""), team, ("Bix",))
    await w.forget("forgetter", gone)  # forget-only key (control)
    withdrawn = await w.propose("proposer", ("ns1", "alice", ""), team, ())
    await w.withdraw("proposer", withdrawn)  # propose-only key, its own proposal (control)
    approved = await w.propose("proposer", ("ns1", "alice", "s1"), team, ("Cyd", "Ada"))
    await w.review("reviewer", approved, True)  # review-only key, a candidate (control)
    await w.save("root", ("ns1", "alice", "s1"), secret, ("Bix",))
    await w.save("root", ("ns2", "bob", ""), team, ("Cyd",))
    await w.propose("secret", ("ns2", "", ""), secret, ("Ada",))
    await w.propose("proposer", ("ns1", "alice", ""), ("team", "secret"), ("Bix",))
    await w.save("root", (REVIEWED, "", ""), team, ("Cyd",))
    # A write-only key changes what its principal wrote in a review-required namespace by
    # proposing (SaveMemory with supersedes becomes a candidate); any other memory there it
    # cannot read, so naming one answers as a random id (the id sweep asks).
    own = await w.save("writer", (REVIEWED, "alice", ""), team, ("Dov",))  # a candidate
    await w.review("reviewer", own, True)
    await w.save("writer", (REVIEWED, "alice", ""), team, ("Eve",), supersedes=own)
    w.doc_probes = [
        await w.document("root", ("ns1", "alice", ""), team),
        await w.document("root", ("ns1", "alice", ""), secret),
    ]
    w.same_text_probes = [
        await w.document("root", ("ns1", "alice", "s2"), team),
        await w.document("root", ("ns1", "alice", "s2"), secret),
    ]
    erased = await w.document("root", ("ns1", "alice", "s1"), team)
    await w.delete("forgetter", erased)  # delete-only key (control)
    await w.document("root", ("ns2", "", ""), secret)


async def mint_keys(server: BrainServer) -> dict[str, str]:
    """Two fresh tenants and one key per spec, minted on one owner connection."""
    tenants = {t: f"walls-{t}-{secrets.token_hex(4)}" for t in (HOME, AWAY)}
    conn = await asyncpg.connect(server.cluster.owner_dsn)
    try:
        async with conn.transaction():
            for tenant in tenants.values():
                await admin.create_tenant(conn, tenant)
            await conn.execute(
                "INSERT INTO namespace_policies (tenant_id, namespace, review_required)"
                " VALUES ($1::uuid, $2, true)",
                await admin.tenant_id_by_name(conn, tenants[HOME]),
                REVIEWED,
            )
            keys = {}
            for name, spec in KEYS.items():
                minted = await admin.mint_key(
                    conn,
                    server.cluster.pepper,
                    tenant=tenants[spec.tenant],
                    principal=name,
                    permissions=parse_permissions(sorted(spec.permissions)),
                    confinement=Confinement(
                        user_id=spec.user,
                        namespaces=frozenset({spec.namespace} if spec.namespace else ()),
                        session_id=spec.session,
                    ),
                    labels=spec.labels,
                    expires_at=None,
                )
                keys[name] = minted.key
        return keys
    finally:
        await conn.close()
