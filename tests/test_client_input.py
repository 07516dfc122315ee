"""What the clients refuse before sending: an API key gRPC cannot carry, and a plain str where
a list of strings belongs. Each refusal sits beside the valid form of the same call, against
the real test server (and the real brain-mcp and brain commands for the key)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from brain.clients import AsyncBrainClient, BrainClient, Scope, graph_draft

from .conftest import BrainServer, unique
from .test_mcp_proxy import BRAIN_MCP, brain_env, call, hit_ids, mcp_session, text_of, word

EVERYTHING = "memories:read,memories:write,memories:propose,knowledge:read,knowledge:write"


def unusable_forms(key: str) -> dict[str, str]:
    """The key as it goes wrong in practice, by what each case is."""
    return {
        "trailing newline": key + "\n",
        "trailing CRLF": key + "\r\n",
        "leading space": " " + key,
        "inner space": key[:12] + " " + key[12:],
        "non-ASCII": key[:-1] + "é",
        "control character": key[:8] + "\x00" + key[8:],
    }


def test_a_key_that_cannot_be_sent_is_refused_by_the_constructor(
    brain_server: BrainServer,
) -> None:
    """Whitespace, a non-ASCII or a control character in the key is a ValueError naming
    api_key (never the key) when the client is made; the same key, clean, works."""
    key = brain_server.mint_key(unique("t"), "agent:key", namespaces=("k",))
    for case, bad in unusable_forms(key).items():
        with pytest.raises(ValueError, match="api_key") as refused:
            BrainClient(brain_server.target, bad)
        assert key[12:] not in str(refused.value), case  # the secret is not echoed
    with pytest.raises(ValueError, match=r"api_key has whitespace around it \('\\n'"):
        BrainClient(brain_server.target, key + "\n")
    with pytest.raises(ValueError, match="api_key contains ' ' at position 12"):
        BrainClient(brain_server.target, key[:12] + " " + key[12:])
    with pytest.raises(ValueError, match=r"non-ASCII character U\+00E9"):
        BrainClient(brain_server.target, key[:-1] + "é")
    with pytest.raises(TypeError, match="api_key must be a str"):
        BrainClient(brain_server.target, key.encode())
    # Positive control: the clean key reaches the server.
    with BrainClient(brain_server.target, key, scope=Scope(namespace="k")) as client:
        assert client.whoami().principal == "agent:key"


async def test_the_async_client_refuses_the_same_keys(brain_server: BrainServer) -> None:
    """AsyncBrainClient refuses every unusable form as BrainClient does; the clean key works."""
    key = brain_server.mint_key(unique("t"), "agent:akey", namespaces=("k",))
    for bad in unusable_forms(key).values():
        with pytest.raises(ValueError, match="api_key"):
            AsyncBrainClient(brain_server.target, bad)
    async with AsyncBrainClient(brain_server.target, key, scope=Scope(namespace="k")) as client:
        assert (await client.whoami()).principal == "agent:akey"


async def test_brain_mcp_refuses_an_unusable_key_at_start(brain_server: BrainServer) -> None:
    """brain-mcp exits at once naming BRAIN_API_KEY when the key has an inner space or a
    non-ASCII character; whitespace around it is stripped, so that key serves tools."""
    ns, marker = unique("ns"), word()
    key = brain_server.mint_key(unique("t"), "agent:mcpkey", user="ivy", namespaces=(ns,))
    for bad in (key[:-1] + "é", key[:12] + " " + key[12:]):
        done = await asyncio.to_thread(
            subprocess.run, BRAIN_MCP, env={**os.environ, **brain_env(brain_server.target, bad)},
            input="", capture_output=True, text=True, timeout=15, check=False,
        )  # fmt: skip
        assert done.returncode != 0, done.stderr
        assert "BRAIN_API_KEY is not a usable key: api_key contains" in done.stderr
        assert key[12:-1] not in done.stderr and not done.stdout
    # Positive control: the key with a newline after it, as a host's config may pass it, is
    # stripped (brain-mcp strips BRAIN_API_KEY) and serves tools.
    async with mcp_session(brain_env(brain_server.target, key + "\n")) as session:
        saved = await call(session, "remember", content=f"Ivy's build runs on {marker}")
        assert not saved.is_error, text_of(saved)
        assert hit_ids(await call(session, "recall", query=marker)) == [
            saved.structured_content["id"]
        ]


def test_brain_ingest_refuses_an_unusable_key(brain_server: BrainServer, tmp_path: Path) -> None:
    """`brain ingest` with a non-ASCII character in BRAIN_API_KEY exits naming the variable
    and stores nothing; the same command with the clean key ingests the file."""
    (tmp_path / "a.md").write_text("# A\n\nalpha\n")
    key = brain_server.mint_key(
        unique("ing"), "dev", permissions="knowledge:read,knowledge:write", namespaces=("p",)
    )
    command = [sys.executable, "-m", "brain.clients.ingest", "ingest", ".", "--collection", "c"]
    env = {**os.environ, "BRAIN_TARGET": brain_server.target}

    def ingest(api_key: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, cwd=tmp_path, env={**env, "BRAIN_API_KEY": api_key}, capture_output=True,
            text=True, timeout=60, check=False,
        )  # fmt: skip

    refused = ingest(key[:-1] + "é")
    assert refused.returncode != 0
    assert "brain: BRAIN_API_KEY is not a usable key: api_key contains the non-ASCII" in (
        refused.stderr
    )
    assert "Traceback" not in refused.stderr
    with BrainClient(brain_server.target, key, scope=Scope(namespace="p")) as client:
        assert list(client.list_documents()) == []
    done = ingest(key)
    assert done.returncode == 0, done.stderr
    assert "collection c: 1 created" in done.stderr
    with BrainClient(brain_server.target, key, scope=Scope(namespace="p")) as client:
        assert len(list(client.list_documents())) == 1  # the same listing finds it now


def test_a_str_where_a_list_of_strings_belongs_is_a_type_error(brain_server: BrainServer) -> None:
    """tags='abc', labels='team' and every other list-of-strings parameter given a str raise
    TypeError naming the parameter and send nothing; the list form of each call works."""
    ns = unique("ns")
    key = brain_server.mint_key(
        unique("t"), "agent:lists", permissions=EVERYTHING, namespaces=(ns,)
    )
    with BrainClient(brain_server.target, key, scope=Scope(namespace=ns)) as client:
        refusals = {
            "tags": lambda: client.save("Deploys run at noon", tags="abc"),
            "labels": lambda: client.save("Deploys run at noon", labels="team"),
            "supersedes": lambda: client.save("Deploys run at one", supersedes="x"),
            "reason tags": lambda: client.propose("Deploys at two", reason="r", tags="ab"),
            "document labels": lambda: client.put_document("c", "a.md", "# A", labels="team"),
            "collections": lambda: client.search_knowledge("deploys", collections="docs"),
            "knowledge_collections": lambda: client.build_context(
                "deploys", knowledge_collections="docs"
            ),
            "document_collections": lambda: client.watch(document_collections="docs"),
        }
        for case, refused_call in refusals.items():
            name = case.split()[-1]
            with pytest.raises(TypeError, match=rf"^{name} must be a list of strings, not a str"):
                refused_call()
        saved = client.save("Deploys run at noon", tags=["ops"])
        with pytest.raises(TypeError, match=r"^tags must be a list of strings, not a str"):
            client.update(saved.memory.id, tags="abc")
        with pytest.raises(TypeError, match=r"^tags\[1\] must be a str, not int"):
            client.save("Deploys run at noon", tags=["ops", 7])
        with pytest.raises(TypeError, match=r"^entities must be a list, not a str"):
            graph_draft("Alice")
        with pytest.raises(TypeError, match=r"^relations\[0\] must be a \(subject, predicate"):
            graph_draft(["ann", "bob"], ("ann", "knows", "bob"))
        with pytest.raises(TypeError, match=r"^single_valued must be a list of strings"):
            graph_draft(single_valued="leads")
        with pytest.raises(TypeError, match=r"^entities\[0\] aliases must be a list of strings"):
            graph_draft([("Alice", "person", "Al")])
        # A misspelt or foreign keyword is a TypeError too (it was dropped: lables=["hr"]
        # stored a memory with the default labels, scope= saved in the client's scope).
        with pytest.raises(TypeError, match=r"^unexpected keyword argument\(s\) lables;"):
            client.save("Deploys run at noon", lables=["hr"])  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"^unexpected keyword argument\(s\) scope;"):
            client.save("Deploys run at noon", scope=Scope(namespace="x"))  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"^unexpected keyword argument\(s\) tag;"):
            client.update(saved.memory.id, tag=["x"])  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"^unexpected keyword argument\(s\) imp;"):
            client.propose("Deploys at two", reason="r", imp=0.9)  # type: ignore[call-arg]
        # Nothing but the one memory saved above was written, and it kept its tag.
        assert [(m.content, list(m.tags)) for m in client.list()] == [
            ("Deploys run at noon", ["ops"])
        ]

        # Positive controls: the same calls with lists work and store exactly those strings.
        tagged = client.save("Deploys run at one", tags=["abc"], labels=["team"])
        assert list(tagged.memory.tags) == ["abc"] and list(tagged.memory.labels) == ["team"]
        moved = client.update(saved.memory.id, tags=["abc", "ops"])
        assert list(moved.memory.tags) == ["abc", "ops"]
        client.save("Deploys run at two", supersedes=[tagged.memory.id])
        proposed = client.propose("Deploys at three", reason="r", tags=["ab"])
        assert list(proposed.candidate.tags) == ["ab"]
        doc = client.put_document("c", "a.md", "# A\n\nDeploys", labels=["team"])
        assert list(doc.document.labels) == ["team"]
        client.search_knowledge("deploys", collections=["docs"])
        client.build_context("deploys", knowledge_collections=["docs"])
        draft = graph_draft(
            [("Alice", "person", ["Al"]), "Bob"], [("Alice", "leads", "Bob")],
            single_valued=["leads"],
        )  # fmt: skip
        assert [(e.name, list(e.aliases)) for e in draft.entities] == [
            ("Alice", ["Al"]),
            ("Bob", []),
        ]
        assert client.save("Alice leads Bob", graph=draft).memory.id


async def test_the_async_client_refuses_a_str_for_a_list(brain_server: BrainServer) -> None:
    """AsyncBrainClient shares the request layer: the same TypeErrors, nothing sent, and the
    list forms work."""
    ns = unique("ns")
    key = brain_server.mint_key(
        unique("t"), "agent:alist", permissions=EVERYTHING, namespaces=(ns,)
    )
    async with AsyncBrainClient(brain_server.target, key, scope=Scope(namespace=ns)) as client:
        with pytest.raises(TypeError, match=r"^tags must be a list of strings, not a str"):
            await client.save("Backups run nightly", tags="abc")
        with pytest.raises(TypeError, match=r"^labels must be a list of strings, not a str"):
            await client.save("Backups run nightly", labels="team")
        with pytest.raises(TypeError, match=r"^knowledge_collections must be a list of strings"):
            await client.build_context("backups", knowledge_collections="docs")
        with pytest.raises(TypeError, match=r"^collections must be a list of strings"):
            await client.search_knowledge("backups", collections="docs")
        with pytest.raises(TypeError, match=r"^labels must be a list of strings"):
            await client.put_document("c", "b.md", "# B", labels="team")
        with pytest.raises(TypeError, match=r"^document_collections must be a list of strings"):
            client.watch(document_collections="docs")
        with pytest.raises(TypeError, match=r"^unexpected keyword argument\(s\) lables;"):
            await client.save("Backups run nightly", lables=["hr"])  # type: ignore[call-arg]
        assert [m async for m in client.list()] == []
        # Positive control.
        saved = await client.save("Backups run nightly", tags=["abc"], labels=["team"])
        assert list(saved.memory.tags) == ["abc"] and list(saved.memory.labels) == ["team"]
        doc = await client.put_document("c", "b.md", "# B\n\nBackups", labels=["team"])
        assert list(doc.document.labels) == ["team"]
        assert [m.id async for m in client.list()] == [saved.memory.id]
