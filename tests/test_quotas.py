"""Per-tenant quotas: set with brain-admin, enforced in the write's own transaction."""

from __future__ import annotations

import asyncio
import json

import grpc

from brain.v1 import common_pb2, review_pb2

from .conftest import BrainServer, unique
from .helpers import Api, rpc_error

WRITER = "memories:read,memories:write,memories:forget,memories:propose"


def stored(brain_server: BrainServer, tenant: str) -> int:
    """Live memories of ``tenant``, counted as the owner behind the API's back."""
    rows = brain_server.sql(
        """SELECT count(*) AS n FROM memories m JOIN tenants t USING (tenant_id)
           WHERE t.name = $1 AND m.retired_at IS NULL AND m.status IN ('active', 'candidate')""",
        tenant,
    )
    return int(rows[0]["n"])


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
    assert by_name[tenant]["quotas"] == {"memories": 2}
    assert by_name[tenant]["usage"] == {"memories": 2}
    assert by_name[other]["quotas"] == {"memories": None}
    assert by_name[other]["usage"] == {"memories": 3}


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
    assert {t["name"]: t for t in listed}[tenant]["quotas"] == {"memories": None}
    # Positive control: the same command with a valid count sets it.
    brain_server.admin("tenants", "set-quota", tenant, "--memories", "3")
    listed = json.loads(brain_server.admin("tenants", "list", "--json").stdout)
    assert {t["name"]: t for t in listed}[tenant]["quotas"] == {"memories": 3}


async def test_a_quota_refusal_counts_nothing_the_caller_cannot_see(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A key confined to alice is refused with the same words whatever other users stored
    (the message named the tenant's count, hidden memories included); the limit is named
    and her own save before the limit is stored (control)."""
    tenant = unique("quota")
    alice = Api(channel, brain_server.mint_key(tenant, "alice", permissions=WRITER,
                                               user="alice"), user_id="alice")  # fmt: skip
    bob = Api(channel, brain_server.mint_key(tenant, "bob", permissions=WRITER, user="bob"),
              user_id="bob")  # fmt: skip
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
