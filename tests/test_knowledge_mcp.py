"""brain-mcp and knowledge: the `search_knowledge` tool through the official MCP client, and
the recall hook's context mixing documents with memories."""

from __future__ import annotations

import json

from brain.clients import BrainClient, Scope

from .conftest import BrainServer, unique
from .test_mcp_proxy import brain_env, call, mcp_session, run_hook, text_of, tool_names, word

KB_READER = "memories:read,memories:write,knowledge:read,knowledge:write"


async def test_search_knowledge_tool_cites_its_sources(brain_server: BrainServer) -> None:
    """A key with knowledge:read gets the tool; hits carry collection, path, headings,
    lines and relevance, and never another tenant's document holding the same words (which
    that tenant's own key does find); min_score holds weak passages back and says so."""
    ns, marker = unique("ns"), word()
    key = brain_server.mint_key(unique("t"), "agent:k", permissions=KB_READER, namespaces=(ns,))
    other = brain_server.mint_key(unique("t"), "agent:o", permissions=KB_READER, namespaces=(ns,))
    doc = f"# Ops\n\n## Restore\n\nRestore backups with the {marker} tool.\n"
    with BrainClient(brain_server.target, key, scope=Scope(namespace=ns)) as c:
        c.put_document("runbooks", "ops.md", doc)
    with BrainClient(brain_server.target, other, scope=Scope(namespace=ns)) as c:
        c.put_document("runbooks", "theirs.md", f"# Theirs\n\nOur own {marker} notes.\n")
        assert [h.source.path for h in c.search_knowledge(marker).hits] == ["theirs.md"]
    async with mcp_session(brain_env(brain_server.target, key, namespace=ns)) as mine:
        assert "search_knowledge" in await tool_names(mine)
        found = await call(mine, "search_knowledge", query=f"restore {marker}")
        assert not found.is_error, text_of(found)
        hits = found.structured_content["hits"]
        assert [h["source"]["path"] for h in hits] == ["ops.md"]  # not the other tenant's
        hit = hits[0]
        assert hit["source"]["collection"] == "runbooks"
        assert hit["source"]["heading_path"] == ["Ops", "Restore"]
        assert (hit["source"]["line_start"], hit["source"]["line_end"]) == (1, 5)
        assert "runbooks/ops.md § Ops > Restore (lines 1-5)" in text_of(found)
        assert 0 < hit["score"] < 1 and found.structured_content["below_floor"] == 0
        # No reranker is configured: fused, or (once the filler stored the chunk's token
        # vectors, which this test does not wait for) reordered by late interaction.
        ranking = found.structured_content["ranking"]
        assert ranking in ("fused", "reranked")
        shown = "fused order;" if ranking == "fused" else "reordered by reading"
        assert f"best first ({shown}" in text_of(found)
        # No relevance reaches 1: the same search with min_score 1 is held back, and says so.
        quiet = await call(mine, "search_knowledge", query=f"restore {marker}", min_score=1.0)
        assert not quiet.is_error and quiet.structured_content["hits"] == []
        assert quiet.structured_content["silenced"] and quiet.structured_content["below_floor"] == 1
        assert "Nothing relevant enough" in text_of(quiet)
        bad = await call(mine, "search_knowledge", query="x", namespace="elsewhere")
        assert bad.is_error and "scope" in text_of(bad)


def test_recall_hook_mixes_documents_into_the_context(brain_server: BrainServer) -> None:
    """The prompt hook's BuildContext holds both the memory and the document passage (with
    its source) for a key with knowledge:read; a memories-only key gets the memory alone."""
    ns, marker = unique("ns"), word()
    tenant = unique("t")
    key = brain_server.mint_key(tenant, "agent:h", permissions=KB_READER, namespaces=(ns,))
    plain = brain_server.mint_key(tenant, "agent:p", namespaces=(ns,))
    with BrainClient(brain_server.target, key, scope=Scope(namespace=ns)) as c:
        c.save(f"We decided to deploy {marker} on Fridays")
        c.put_document("runbooks", "deploy.md", f"# Deploy\n\nTo deploy {marker}, run make.\n")
    payload = json.dumps({"prompt": f"how do we deploy {marker}?", "session_id": "s1"})
    done = run_hook(brain_env(brain_server.target, key, namespace=ns), payload)
    assert done.returncode == 0
    assert f"We decided to deploy {marker}" in done.stdout
    assert "runbooks/deploy.md § Deploy" in done.stdout
    only = run_hook(brain_env(brain_server.target, plain, namespace=ns), payload)
    assert f"We decided to deploy {marker}" in only.stdout
    assert "runbooks/deploy.md" not in only.stdout
