"""Conflicts as the clients and brain-mcp show them (issue 30): the Python client lists,
resolves and consolidates; an agent that remembers an update is told at once, and a
recall marks the older memory as possibly outdated."""

from __future__ import annotations

import json

from brain.clients import BrainClient, Scope
from brain.v1 import common_pb2

from .conftest import BrainServer, unique
from .test_conflicts import NEW, OLD, REVIEWER, WRITER
from .test_mcp_proxy import brain_env, call, mcp_session, text_of


def test_the_client_lists_resolves_and_consolidates(brain_server: BrainServer) -> None:
    tenant, ns = unique("cf"), unique("ns")
    scope = Scope(namespace=ns)
    writer_key = brain_server.mint_key(tenant, "agent:writer", permissions=WRITER)
    reviewer_key = brain_server.mint_key(tenant, "carol", permissions=REVIEWER)
    with (
        BrainClient(brain_server.target, writer_key, scope=scope) as writer,
        BrainClient(brain_server.target, reviewer_key, scope=scope) as reviewer,
    ):
        old = writer.save(OLD).memory.id
        saved = writer.save(NEW)
        [found] = saved.conflicts
        assert [c.id for c in reviewer.list_conflicts()] == [found.id]
        assert [c.id for c in reviewer.list_conflicts(memory_id=old)] == [found.id]
        decided = reviewer.resolve_conflict(found.id, "approve", reason="port moved")
        assert decided.older.status == common_pb2.MEMORY_STATUS_SUPERSEDED
        assert list(reviewer.list_conflicts()) == []
        resolved = reviewer.list_conflicts(states=[common_pb2.CONFLICT_STATE_RESOLVED])
        assert [c.id for c in resolved] == [found.id]
        writer.save("The release checklist lives in the ops wiki")
        writer.save("The release checklist lives in the ops wiki pages")
        plan = reviewer.consolidate(dry_run=True)
        assert len(plan.consolidations) == 1 and not plan.consolidations[0].candidate.id


async def test_an_agent_hears_of_the_conflict_and_recall_marks_the_older(
    brain_server: BrainServer,
) -> None:
    tenant, ns = unique("cf"), unique("ns")
    key = brain_server.mint_key(tenant, "agent:mcp", permissions=WRITER, namespaces=(ns,))
    async with mcp_session(brain_env(brain_server.target, key, namespace=ns)) as agent:
        first = await call(agent, "remember", content=OLD)
        assert not first.is_error and first.structured_content["conflicts"] == []
        old_id = first.structured_content["id"]
        second = await call(agent, "remember", content=NEW)
        assert not second.is_error, text_of(second)
        [conflict] = second.structured_content["conflicts"]
        assert conflict["older_id"] == old_id and conflict["state"] == "open"
        assert f"conflicts with {old_id}" in text_of(second)
        recalled = await call(agent, "recall", query="staging database port")
        assert not recalled.is_error, text_of(recalled)
        assert f"may be outdated: {second.structured_content['id']}" in text_of(recalled)
        marked = {h["id"]: h.get("conflicts", []) for h in recalled.structured_content["hits"]}
        assert [c["newer_id"] for c in marked[old_id]] == [second.structured_content["id"]]


def test_brain_admin_lists_conflicts_and_proposes_consolidations(
    brain_server: BrainServer,
) -> None:
    """The operator's view: open conflicts of one tenant only, and a consolidation proposed
    as admin:<user>, which a reviewer of the tenant then approves."""
    tenant, ns = unique("cf"), unique("ns")
    scope = Scope(namespace=ns)
    writer_key = brain_server.mint_key(tenant, "agent:writer", permissions=WRITER)
    reviewer_key = brain_server.mint_key(tenant, "carol", permissions=REVIEWER)
    other_key = brain_server.mint_key(unique("cf"), "eve", permissions=WRITER)
    with (
        BrainClient(brain_server.target, writer_key, scope=scope) as writer,
        BrainClient(brain_server.target, reviewer_key, scope=scope) as reviewer,
        BrainClient(brain_server.target, other_key, scope=scope) as other,
    ):
        writer.save(OLD)
        [found] = writer.save(NEW).conflicts
        other.save(OLD)
        [elsewhere] = other.save(NEW).conflicts  # another tenant's: never listed here
        listed = brain_server.admin("conflicts", "list", "--tenant", tenant, "--json").stdout
        assert found.id in listed and elsewhere.id not in listed
        sources = [
            writer.save("The design review happens in room 4B every week").memory.id,
            writer.save("Every week the design review happens in room 4B").memory.id,
        ]
        done = brain_server.admin("conflicts", "consolidate", ns, "--tenant", tenant, "--json")
        [proposal] = json.loads(done.stdout)
        assert sorted(proposal["sources"]) == sorted(sources)
        approved = reviewer.review(proposal["candidate"], "approve", reason="one fact")
        assert approved.memory.status == common_pb2.MEMORY_STATUS_ACTIVE
        assert {writer.get(s).memory.status for s in sources} == {
            common_pb2.MEMORY_STATUS_SUPERSEDED
        }
        bad = brain_server.admin("conflicts", "consolidate", ns, "--tenant", tenant,
                                 "--max-clusters", "0", check=False)  # fmt: skip
        assert bad.returncode == 2 and "--max-clusters" in bad.stderr
