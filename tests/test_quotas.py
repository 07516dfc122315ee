"""Per-tenant quotas: set with brain-admin, enforced in the write's own transaction."""

from __future__ import annotations

import asyncio
import json

import grpc

from brain.authz import Confinement, RequestScope
from brain.server.domain import quotas
from brain.server.storage import quotas as quota_sql
from brain.server.storage import review as review_sql
from brain.server.storage.db import Database
from brain.server.storage.visibility import Params, Visibility, visibility_predicate
from brain.v1 import common_pb2, knowledge_pb2, review_pb2

from .conftest import BrainServer, fillers_held, unique
from .helpers import Api, rpc_error
from .test_knowledge import delete_call, put

WRITER = "memories:read,memories:write,memories:forget,memories:propose"
NO_QUOTAS = {"memories": None, "documents": None, "document_bytes": None}


def stored(brain_server: BrainServer, tenant: str) -> int:
    """Live memories of ``tenant``, counted as the owner behind the API's back."""
    rows = brain_server.sql(
        """SELECT count(*) AS n FROM memories m JOIN tenants t USING (tenant_id)
           WHERE t.name = $1 AND m.retired_at IS NULL AND m.status IN ('active', 'candidate')""",
        tenant,
    )
    return int(rows[0]["n"])


def confined_pair(
    brain_server: BrainServer, channel: grpc.aio.Channel, tenant: str, permissions: str
) -> tuple[Api, Api]:
    """Keys of alice and of bob, each confined to their own user, in ``tenant``."""

    def confined(name: str) -> Api:
        key = brain_server.mint_key(tenant, name, permissions=permissions, user=name)
        return Api(channel, key, user_id=name)

    return confined("alice"), confined("bob")


def set_quota(brain_server: BrainServer, tenant: str, memories: str) -> None:
    brain_server.sql(
        """INSERT INTO tenant_quotas (tenant_id, max_memories)
           SELECT tenant_id, $2 FROM tenants WHERE name = $1
           ON CONFLICT (tenant_id) DO UPDATE SET max_memories = EXCLUDED.max_memories""",
        tenant,
        None if memories == "none" else int(memories),
    )


async def test_a_save_past_the_quota_is_refused_naming_it_and_admin_shows_usage(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Past the quota a save is RESOURCE_EXHAUSTED naming it and writes nothing; dedupe,
    supersede and forget keep the count true; `tenants list --json` shows quota and usage."""
    tenant, other = unique("quota"), unique("noquota")
    api = Api(channel, brain_server.mint_key(tenant, "alice", permissions=WRITER))
    free = Api(channel, brain_server.mint_key(other, "bob", permissions=WRITER))
    brain_server.admin("tenants", "set-quota", tenant, "--memories", "2")

    first = await api.save("quota first fact")
    await api.save("quota second fact")
    err = await rpc_error(api.save("quota third fact"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "quota memories" in (err.details() or "")
    assert stored(brain_server, tenant) == 2  # nothing half-written
    # A deduplicated save adds nothing, and superseding one memory keeps the count.
    await api.save("quota first fact")
    replacement = await api.save("quota first fact, corrected", supersedes=[first.memory.id])
    assert stored(brain_server, tenant) == 2
    # Forgetting the replacement reopens what it replaced for review, which still counts;
    # forgetting that too frees room. A tenant without a quota is not limited.
    await api.forget(replacement.memory.id)
    assert stored(brain_server, tenant) == 2
    await api.forget(first.memory.id)
    await api.save("quota third fact")
    for i in range(3):
        await free.save(f"unlimited fact {i}")

    listed = json.loads(brain_server.admin("tenants", "list", "--json").stdout)
    by_name = {t["name"]: t for t in listed}
    events = brain_server.sql(
        """SELECT e.outcome FROM audit_events e JOIN tenants t USING (tenant_id)
           WHERE t.name = $1 AND e.method = 'admin.tenants.set_quota'""",
        tenant,
    )
    assert [e["outcome"] for e in events] == ["memories=2"]
    assert by_name[tenant]["quotas"] == {**NO_QUOTAS, "memories": 2}
    assert by_name[tenant]["usage"] == {"memories": 2, "documents": 0, "document_bytes": 0}
    assert by_name[other]["quotas"] == NO_QUOTAS
    assert by_name[other]["usage"] == {"memories": 3, "documents": 0, "document_bytes": 0}


async def test_concurrent_writers_do_not_overshoot_the_quota(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Twelve concurrent saves against a quota of five: exactly five are stored."""
    tenant = unique("quota-race")
    api = Api(channel, brain_server.mint_key(tenant, "alice", permissions=WRITER))
    set_quota(brain_server, tenant, "5")

    async def save(i: int) -> grpc.StatusCode:
        try:
            await api.save(f"racing fact number {i}")
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK

    codes = await asyncio.gather(*(save(i) for i in range(12)))
    assert codes.count(grpc.StatusCode.OK) == 5
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 7
    assert stored(brain_server, tenant) == 5


async def test_a_confined_key_counts_the_whole_tenant_and_proposals_count(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The quota counts the whole tenant, not what a confined key sees; proposals count."""
    tenant = unique("quota-confined")
    wide = Api(channel, brain_server.mint_key(tenant, "admin", permissions=WRITER))
    narrow = Api(
        channel,
        brain_server.mint_key(tenant, "agent", permissions=WRITER, user="u1"),
        user_id="u1",
    )
    await wide.save("someone else's fact", scope=wide.scope(user_id="u2"))
    await narrow.save("u1 fact")
    set_quota(brain_server, tenant, "2")
    # The narrow key sees one memory but the tenant stores two: the quota is spent.
    assert len(await narrow.list_all()) == 1
    err = await rpc_error(narrow.save("u1 second fact"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    set_quota(brain_server, tenant, "3")
    await narrow.review.ProposeMemory(
        review_pb2.ProposeMemoryRequest(
            scope=narrow.scope(), memory=common_pb2.MemoryDraft(content="u1 proposal"), reason="r"
        ),
        metadata=narrow.md,
    )
    err = await rpc_error(narrow.save("u1 third fact"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    set_quota(brain_server, tenant, "none")
    await narrow.save("u1 third fact")
    assert stored(brain_server, tenant) == 4


def test_set_quota_refuses_bad_input(brain_server: BrainServer) -> None:
    """set-quota refuses a negative count and an unknown tenant, and changes nothing."""
    tenant = unique("quota-bad")
    brain_server.mint_key(tenant, "alice")
    done = brain_server.admin("tenants", "set-quota", tenant, "--memories", "-1", check=False)
    assert done.returncode == 2 and "--memories" in done.stderr
    done = brain_server.admin("tenants", "set-quota", tenant, "--memories", "9" * 20, check=False)
    assert done.returncode == 2 and "--memories" in done.stderr
    done = brain_server.admin(
        "tenants", "set-quota", unique("nosuch"), "--memories", "3", check=False
    )
    assert done.returncode == 2 and "no tenant named" in done.stderr
    listed = json.loads(brain_server.admin("tenants", "list", "--json").stdout)
    done = brain_server.admin("tenants", "set-quota", tenant, "--document-bytes", "-5", check=False)
    assert done.returncode == 2 and "--document-bytes" in done.stderr
    done = brain_server.admin("tenants", "set-quota", tenant, check=False)
    assert done.returncode == 2 and "--documents" in done.stderr  # names what to give
    listed = json.loads(brain_server.admin("tenants", "list", "--json").stdout)
    assert {t["name"]: t for t in listed}[tenant]["quotas"] == NO_QUOTAS
    # Positive control: the same command with a valid count sets it, and a later one
    # setting another limit leaves it as it is.
    brain_server.admin("tenants", "set-quota", tenant, "--memories", "3")
    brain_server.admin("tenants", "set-quota", tenant, "--documents", "7")
    listed = json.loads(brain_server.admin("tenants", "list", "--json").stdout)
    assert {t["name"]: t for t in listed}[tenant]["quotas"] == {
        **NO_QUOTAS, "memories": 3, "documents": 7,
    }  # fmt: skip


async def test_a_quota_refusal_counts_nothing_the_caller_cannot_see(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A key confined to alice is refused with the same words whatever other users stored
    (the message named the tenant's count, hidden memories included); the limit is named
    and her own save before the limit is stored (control)."""
    tenant = unique("quota")
    alice, bob = confined_pair(brain_server, channel, tenant, WRITER)
    for i in range(3):
        await bob.save(f"bob's hidden note {i}")
    brain_server.admin("tenants", "set-quota", tenant, "--memories", "4")
    assert (await alice.save("alice's own note")).memory.id  # control: under the limit
    refused = await rpc_error(alice.save("alice's second note"))
    brain_server.admin("tenants", "set-quota", tenant, "--memories", "6")
    await bob.save("bob's fourth hidden note")
    await bob.save("bob's fifth hidden note")
    again = await rpc_error(alice.save("alice's third note"))
    assert refused.code() == again.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "at most 4" in (refused.details() or "") and "at most 6" in (again.details() or "")
    assert (refused.details() or "").replace("4", "6") == again.details()  # no hidden count
    assert "stores 4" not in (refused.details() or "")


# --- documents (issue 31) ----------------------------------------------------------------

KB = "knowledge:read,knowledge:write,knowledge:delete"


def documents_stored(brain_server: BrainServer, tenant: str) -> int:
    rows = brain_server.sql(
        """SELECT count(*) AS n FROM documents d JOIN tenants t USING (tenant_id)
           WHERE t.name = $1 AND d.retired_at IS NULL AND d.status = 'active'""",
        tenant,
    )
    return int(rows[0]["n"])


async def test_documents_count_in_the_quota_and_a_put_past_it_is_refused_naming_it(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Past --documents a new document is RESOURCE_EXHAUSTED naming the limit and writes
    nothing, while a new version of a stored one still lands; a delete frees room. Past
    --document-bytes a put that grows the content is refused, one that shrinks it is not.
    `tenants list` shows both limits and the usage."""
    tenant = unique("dquota")
    api = Api(channel, brain_server.mint_key(tenant, "w", permissions=KB))
    brain_server.admin("tenants", "set-quota", tenant, "--documents", "2")
    first = (await put(api, "a.md", "# A\n\nalpha\n")).document
    await put(api, "b.md", "# B\n\nbravo\n")
    err = await rpc_error(put(api, "c.md", "# C\n\ncharlie\n"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (err.details() or "").startswith("quota documents exceeded")
    assert "at most 2 documents" in (err.details() or "")
    assert documents_stored(brain_server, tenant) == 2  # nothing half-written
    updated = await put(api, "a.md", "# A\n\nalpha, revised\n")  # a version, no new document
    assert updated.outcome == knowledge_pb2.PUT_OUTCOME_UPDATED
    await delete_call(api, first.id)
    assert (await put(api, "c.md", "# C\n\ncharlie\n")).outcome == knowledge_pb2.PUT_OUTCOME_CREATED

    brain_server.admin("tenants", "set-quota", tenant, "--documents", "none")
    used = int(
        brain_server.sql(
            "SELECT sum(size_bytes) AS n FROM documents d JOIN tenants t USING (tenant_id)"
            " WHERE t.name = $1 AND d.retired_at IS NULL AND d.status = 'active'",
            tenant,
        )[0]["n"]
    )
    brain_server.admin("tenants", "set-quota", tenant, "--document-bytes", str(used + 20))
    err = await rpc_error(put(api, "d.md", "# D\n\n" + "delta " * 10))  # 66 bytes > 20
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "at most " + str(used + 20) + " bytes" in (err.details() or "")
    small = await put(api, "e.md", "# E\n\necho\n")  # 12 bytes fit (control)
    assert small.outcome == knowledge_pb2.PUT_OUTCOME_CREATED
    shrunk = await put(api, "c.md", "# C\n")  # over the limit now? it shrinks: allowed
    assert shrunk.outcome == knowledge_pb2.PUT_OUTCOME_UPDATED
    listed = {
        t["name"]: t for t in json.loads(brain_server.admin("tenants", "list", "--json").stdout)
    }
    assert listed[tenant]["quotas"] == {**NO_QUOTAS, "document_bytes": used + 20}
    assert listed[tenant]["usage"]["documents"] == 3
    events = brain_server.sql(
        """SELECT e.outcome FROM audit_events e JOIN tenants t USING (tenant_id)
           WHERE t.name = $1 AND e.method = 'admin.tenants.set_quota' ORDER BY e.seq""",
        tenant,
    )
    assert events[0]["outcome"] == "memories=none documents=2 document_bytes=none"


async def test_a_document_quota_refusal_counts_nothing_the_caller_cannot_see(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A key confined to alice is refused with the same words however many documents other
    users stored (only the limit is named); her put under the limit lands (control)."""
    tenant = unique("dquota")
    alice, bob = confined_pair(brain_server, channel, tenant, KB)
    for i in range(3):
        await put(bob, f"bob{i}.md", f"# Bob\n\nhidden {i}\n")
    brain_server.admin("tenants", "set-quota", tenant, "--documents", "4")
    assert (await put(alice, "mine.md", "# Mine\n\nalice\n")).outcome == 1  # control
    refused = await rpc_error(put(alice, "second.md", "# Second\n\nalice\n"))
    brain_server.admin("tenants", "set-quota", tenant, "--documents", "6")
    await put(bob, "bob3.md", "# Bob\n\nhidden 3\n")
    await put(bob, "bob4.md", "# Bob\n\nhidden 4\n")
    again = await rpc_error(put(alice, "third.md", "# Third\n\nalice\n"))
    assert refused.code() == again.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (refused.details() or "").replace("4", "6") == again.details()  # no hidden count


async def test_concurrent_puts_do_not_overshoot_the_document_quota(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Eight concurrent puts of new documents against a quota of three: exactly three land."""
    tenant = unique("dquota-race")
    api = Api(channel, brain_server.mint_key(tenant, "w", permissions=KB))
    brain_server.admin("tenants", "set-quota", tenant, "--documents", "3")

    async def one(i: int) -> grpc.StatusCode:
        try:
            await put(api, f"race{i}.md", f"# Race\n\nracing document {i}\n")
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK

    codes = await asyncio.gather(*(one(i) for i in range(8)))
    assert codes.count(grpc.StatusCode.OK) == 3
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 5
    assert documents_stored(brain_server, tenant) == 3


async def test_per_request_caps_are_invalid_argument_naming_the_cap(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Caps on one put (size, chunk count) are the caller's mistake: INVALID_ARGUMENT naming
    `content` and the cap, nothing written, whatever the tenant's quota; a put just under
    the size cap is stored (control)."""
    tenant = unique("dcap")
    api = Api(channel, brain_server.mint_key(tenant, "w", permissions=KB))
    brain_server.admin("tenants", "set-quota", tenant, "--documents", "100")
    big = await rpc_error(put(api, "big.txt", "x" * (1024 * 1024 + 1)))
    assert big.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (big.details() or "").startswith("content: is 1048577 bytes; the limit is 1048576")
    # Under 1 MiB, but every line is a window of the local model's tokens on its own.
    many = await rpc_error(put(api, "many.txt", ("!" * 250 + "\n") * 4100))
    assert many.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (many.details() or "").startswith("content: would make more than 4000 chunks")
    assert documents_stored(brain_server, tenant) == 0
    # About 1,000 chunks of a model window each: deleted once stored, before any filler
    # embeds them (a minute or more of the worker's CPU, for vectors nothing reads).
    with fillers_held():
        near = await put(api, "near.txt", ("word " * 200 + "\n\n") * 1000)
        assert near.outcome == knowledge_pb2.PUT_OUTCOME_CREATED
        assert documents_stored(brain_server, tenant) == 1
        await delete_call(api, near.document.id)


def test_the_hidden_usage_is_rounded_up_to_a_grain_of_the_limit() -> None:
    """What the caller sees counts exactly, the rest rounded up to 1/32 of the limit: a key
    that sees the whole tenant is checked exactly, and rounding only refuses earlier."""
    assert quotas.grain(100_000) == 3125 and quotas.grain(40) == 2 and quotas.grain(4) == 1
    # Everything seen: exact.
    assert not quotas.exceeds(100, used=99, visible=99, adding=1)
    assert quotas.exceeds(100, used=100, visible=100, adding=1)
    # 1,000 or 2,000 hidden bytes of a 100,000 limit read alike: 3,125.
    for hidden in (1, 1000, 2000, 3125):
        assert not quotas.exceeds(100_000, used=hidden + 96_000, visible=96_000, adding=875)
        assert quotas.exceeds(100_000, used=hidden + 96_000, visible=96_000, adding=876)
    assert quotas.exceeds(100_000, used=3126 + 96_000, visible=96_000, adding=875)
    for used in range(0, 120):  # never more lenient than the exact count
        for visible in range(0, used + 1):
            if used + 1 > 100:
                assert quotas.exceeds(100, used, visible, 1)


def sized(n: int) -> str:
    """Markdown content of exactly ``n`` bytes."""
    return ("# Probe\n\n" + "alpha bravo charlie delta echo\n" * (n // 31 + 1))[:n]


async def test_a_writer_cannot_measure_what_it_cannot_see_by_the_quota(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A writer growing its own document until refused, then shrinking it, used to read
    the bytes other users store exactly (an outside review measured a hidden 4,882-byte
    document to the byte). The hidden part counts rounded up to a grain of the limit, so
    alice's answers are the same whether bob's document holds 1,000 or 2,000 bytes; at the
    grain's edge her put lands (control), and bob's own puts land (control). Memories
    alike: with bob's 1 or 2 hidden memories alice's saves stop at the same count."""
    tenant = unique("qgrain")
    alice, bob = confined_pair(brain_server, channel, tenant, KB + ",memories:write")
    limit = 100_000
    edge = limit - quotas.grain(limit)  # what alice may hold while anything is hidden
    created = knowledge_pb2.PUT_OUTCOME_CREATED
    assert (await put(bob, "payroll.md", sized(1000))).outcome == created  # control
    assert (await put(alice, "probe.md", sized(10))).outcome == created
    brain_server.admin("tenants", "set-quota", tenant, "--document-bytes", str(limit))
    answers = []
    with fillers_held():  # the probes' ~100 chunks each: never embedded for nothing
        try:
            for bob_bytes in (1000, 2000):
                if bob_bytes != 1000:
                    grown = await put(bob, "payroll.md", sized(bob_bytes))
                    assert grown.outcome == knowledge_pb2.PUT_OUTCOME_UPDATED  # control
                over = await rpc_error(put(alice, "probe.md", sized(edge + 1)))
                assert over.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                at_edge = await put(alice, "probe.md", sized(edge))  # control: lands
                assert at_edge.outcome == knowledge_pb2.PUT_OUTCOME_UPDATED
                assert (await put(alice, "probe.md", sized(10))).outcome  # shrinking: always
                answers.append(over.details())
            assert answers[0] == answers[1]
        finally:  # and gone before any filler runs again
            brain_server.admin("tenants", "set-quota", tenant, "--document-bytes", "none")
            for api, path in ((alice, "probe.md"), (bob, "payroll.md")):
                doc = (await put(api, path, sized(10))).document
                await delete_call(api, doc.id)

    memories = 64  # a grain of 2
    await bob.save("bob's hidden note 0")
    for i in range(61):
        await alice.save(f"alice's note number {i}")
    brain_server.admin("tenants", "set-quota", tenant, "--memories", str(memories))
    assert (await alice.save("alice's note number 61")).memory.id  # control: 62 + 1 hidden
    first = await rpc_error(alice.save("alice's note number 62"))  # exact: 63 + 1 would fit
    assert (await bob.save("bob's hidden note 1")).memory.id  # control: bob sees his own two
    second = await rpc_error(alice.save("alice's note number 62"))
    assert first.code() == second.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert first.details() == second.details()


async def test_the_visible_count_is_the_memories_the_caller_sees(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The quota's exact part, read from the lexical statistics' cell counts plus the
    candidates, equals a count of the rows the visibility predicate passes, for a confined
    writer, a reviewer and an unconfined key, in a world of other users, the team, another
    label, proposals, a forgotten and a superseded memory; the tenant's count, read the
    same way, equals the scan's."""
    tenant, ns = unique("qvis"), "proj"
    admin = Api(
        channel,
        brain_server.mint_key(
            tenant, "admin", permissions=WRITER + ",memories:review", labels=("team", "hr")
        ),
    )
    alice, bob = confined_pair(brain_server, channel, tenant, WRITER)
    for i in range(3):
        await alice.save(f"alice's note {i}")
    gone = await alice.save("alice's note to forget")
    await alice.forget(gone.memory.id)
    old = await alice.save("alice's note to replace")
    await alice.save("alice's replacement note", supersedes=[old.memory.id])
    await bob.save("bob's note")
    await admin.save("a team note", scope=admin.scope(user_id=""))
    await admin.save("an hr note", scope=admin.scope(user_id=""), labels=["hr"])
    for who in (alice, bob):
        await who.review.ProposeMemory(
            review_pb2.ProposeMemoryRequest(
                scope=who.scope(), memory=common_pb2.MemoryDraft(content="an idea"), reason="r"
            ),
            metadata=who.md,
        )
    tenant_id = brain_server.sql("SELECT tenant_id FROM tenants WHERE name = $1", tenant)[0][0]
    db = await Database.connect(brain_server.cluster.app_dsn)
    try:
        for confinement, scope, labels, principal, review in (
            (Confinement(user_id="alice"), RequestScope(user_id="alice", namespace=ns),
             {"team"}, "alice", False),
            (Confinement(), RequestScope(namespace=ns), {"team", "hr"}, "admin", True),
            (Confinement(), RequestScope(namespace=ns), {"team"}, "admin", False),
        ):  # fmt: skip
            vis = Visibility(
                tenant_id=str(tenant_id), labels=frozenset(labels), confinement=confinement,
                scope=scope, principal=principal, may_review=review,
            )  # fmt: skip
            async with db.tenant_tx(
                str(tenant_id), labels=frozenset(labels), confinement=confinement,
                may_review=review, principal=principal,
            ) as conn:  # fmt: skip
                p = Params()
                slow = await conn.fetchval(
                    f"""SELECT count(*) FROM memories m
                        WHERE m.tenant_id = {p.add(str(tenant_id))}::uuid
                          AND m.retired_at IS NULL AND m.status IN ('active', 'candidate')
                          AND {visibility_predicate(vis, p)}""",
                    *p.values,
                )
                assert await quota_sql.visible_memories(conn, vis) == slow > 0, principal
    finally:
        await db.close()
    assert stored(brain_server, tenant) == 9  # 4 of alice, bob's, 2 team, 2 proposals
    # The tenant's count the quota reads (from the same cell counts, migration 0067) is the
    # scan's, and so is what `tenants list` shows.
    used = brain_server.sql("SELECT brain_memories_used($1::uuid) AS n", tenant_id)[0]["n"]
    assert used == 9


async def test_what_a_key_sees_counts_in_every_scope_it_may_ask_for(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The exact part of the check is what the key sees in any scope, not only the
    request's. A key that sees everything is checked exactly from a namespace it never
    wrote to (it was refused a grain early: rows of other namespaces read as hidden). And
    alice's rows in another session are hers, not hidden: moving a known number of them
    across the rounding read bob's hidden count exactly (an outside review's attack).
    Controls: the saves up to the limit land."""
    tenant = unique("qwide")
    wide = Api(channel, brain_server.mint_key(tenant, "admin", permissions=WRITER))
    for i in range(40):
        await wide.save(f"a team note number {i}")
    brain_server.admin("tenants", "set-quota", tenant, "--memories", "45")  # a grain of 2
    fresh = wide.scope(namespace="fresh")
    for i in range(5):  # exactly the 5 left, though proj's 40 are not in this scope
        assert (await wide.save(f"a fresh note {i}", scope=fresh)).memory.id
    refused = await rpc_error(wide.save("one too many", scope=fresh))
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    tenant = unique("qsess")
    alice, bob = confined_pair(brain_server, channel, tenant, WRITER)
    await bob.save("bob's hidden note")
    s1, s2 = alice.scope(session_id="s1"), alice.scope(session_id="s2")
    for i in range(31):
        await alice.save(f"alice's note in s2 number {i}", scope=s2)
    for i in range(30):
        await alice.save(f"alice's note in s1 number {i}", scope=s1)
    brain_server.admin("tenants", "set-quota", tenant, "--memories", "64")  # a grain of 2
    assert (await alice.save("alice's note in s1 number 30", scope=s1)).memory.id  # 62 + 2
    # Seen from s1 alone, s2's 31 would join bob's 1 as hidden (32, a whole number of
    # grains) and this save would land: 31 + 1 + 32 = 64.
    over = await rpc_error(alice.save("alice's note in s1 number 31", scope=s1))
    assert over.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_memory_a_key_reopened_counts_as_seen_by_it(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Carol supersedes the admin's memory and forgets her successor: it comes back as the
    admin's candidate, which carol cannot see (control: NOT_FOUND to her, a candidate to
    the admin), yet it counts. Counted as hidden, each such move shifted a known row across
    the quota's rounding and read the rest exactly (an outside review's lever); it counts
    as seen by carol now, for the quota and for the namespace's pending cap."""
    tenant = unique("qreopen")
    admin = Api(channel, brain_server.mint_key(tenant, "admin", permissions=WRITER
                                               + ",memories:review"))  # fmt: skip
    carol = Api(channel, brain_server.mint_key(tenant, "carol", permissions=WRITER))
    target = await admin.save("the staging database listens on port 5433")
    await carol.save("carol's own note")
    tenant_id = str(brain_server.sql("SELECT tenant_id FROM tenants WHERE name = $1", tenant)[0][0])
    vis = Visibility(
        tenant_id=tenant_id, labels=frozenset({"team"}), confinement=Confinement(),
        scope=RequestScope(namespace="proj"), principal="carol", may_review=False,
    )  # fmt: skip
    db = await Database.connect(brain_server.cluster.app_dsn)

    async def seen() -> tuple[int, int]:
        async with db.tenant_tx(tenant_id, labels=frozenset({"team"}), principal="carol") as conn:
            return (
                await quota_sql.visible_memories(conn, vis),
                await review_sql.visible_pending_in_namespace(conn, vis, "proj"),
            )

    try:
        before = await seen()
        successor = await carol.save("it listens on port 5434", supersedes=[target.memory.id])
        await carol.forget(successor.memory.id)
        reopened = await admin.get(target.memory.id)
        assert reopened.status == common_pb2.MEMORY_STATUS_CANDIDATE  # control
        missing = await rpc_error(carol.get(target.memory.id))
        assert missing.code() == grpc.StatusCode.NOT_FOUND  # hidden from carol
        assert await seen() == (before[0], before[1] + 1) == (2, 1)
    finally:
        await db.close()
    assert stored(brain_server, tenant) == 2


def test_a_limit_too_small_to_hide_anything_is_set_with_a_note(brain_server: BrainServer) -> None:
    """A quota or pending cap of 32 or less rounds what a key cannot see to one row: a key
    refused by it counts others' rows exactly. brain-admin sets it and says so on stderr
    (the JSON on stdout unchanged); a larger limit is set without a word."""
    tenant = unique("quota-grain")
    brain_server.mint_key(tenant, "alice")
    small = brain_server.admin("tenants", "set-quota", tenant, "--memories", "8", "--json")
    assert json.loads(small.stdout)["quotas"]["memories"] == 8
    assert "--memories 8 is 32 or less" in small.stderr and "one by one" in small.stderr
    cap = brain_server.admin("namespaces", "set", "proj", "--tenant", tenant, "--max-pending", "5")
    assert "--max-pending 5 is 32 or less" in cap.stderr
    large = brain_server.admin("tenants", "set-quota", tenant, "--memories", "1000")
    assert large.stderr == "" and "1000" in large.stdout
    wide = brain_server.admin(
        "namespaces", "set", "proj", "--tenant", tenant, "--max-pending", "50"
    )
    assert wide.stderr == ""
