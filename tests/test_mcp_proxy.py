"""brain-mcp driven as a subprocess by the official MCP client over stdio, against a real server."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import string
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from brain.clients import BrainClient, Scope, errors

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .test_client import wait_until_down

_SCRIPT = Path(sys.executable).with_name("brain-mcp")
BRAIN_MCP = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "brain.clients.mcp.main"]
ALL_TOOLS = {
    "remember",
    "recall",
    "get_memory",
    "memory_history",
    "get_memory_history",
    "list_memories",
    "update_memory",
    "forget",
    "propose_memory",
    "list_candidates",
    "build_context",
    "lookup_entity",
    "entity_neighbours",
    "search_knowledge",
}


def word() -> str:
    """A made-up word that matches nothing but the memory that contains it."""
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(10))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def brain_env(
    target: str, key: str, user: str = "", namespace: str = "", **extra: str
) -> dict[str, str]:
    env = {
        "BRAIN_TARGET": target,
        "BRAIN_API_KEY": key,
        "BRAIN_USER_ID": user,
        "BRAIN_NAMESPACE": namespace,
        **extra,
    }
    return {k: v for k, v in env.items() if v}


@asynccontextmanager
async def mcp_session(
    env: dict[str, str], notifications: list[Any] | None = None
) -> AsyncIterator[ClientSession]:
    """Launch brain-mcp with `env` and yield an initialized MCP client session."""
    params = StdioServerParameters(command=BRAIN_MCP[0], args=BRAIN_MCP[1:], env=env)

    async def on_message(message: Any) -> None:
        if notifications is not None:
            notifications.append(message)

    async with (
        stdio_client(params) as (read_stream, write_stream),
        ClientSession(read_stream, write_stream, message_handler=on_message) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> types.CallToolResult:
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, types.CallToolResult)
    return result


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def hit_ids(result: types.CallToolResult) -> list[str]:
    assert not result.is_error, text_of(result)
    return [h["id"] for h in result.structured_content["hits"]]


async def tool_names(session: ClientSession) -> set[str]:
    return {t.name for t in (await session.list_tools()).tools}


async def test_remember_recall_forget_in_the_scope_from_env(brain_server: BrainServer) -> None:
    """Two proxies stamp their env scope: each recalls its own memories, never the other's."""
    tenant, ns = unique("t"), unique("ns")
    perms = "memories:read,memories:write,memories:forget"
    alice_key = brain_server.mint_key(
        tenant, "agent:a", permissions=perms, user="alice", namespaces=(ns,)
    )
    bob_key = brain_server.mint_key(tenant, "agent:b", user="bob", namespaces=(ns,))
    alice_word, bob_word = word(), word()

    async with (
        mcp_session(brain_env(brain_server.target, alice_key, "alice", ns)) as alice,
        mcp_session(brain_env(brain_server.target, bob_key, "bob", ns)) as bob,
    ):
        # Tools follow WhoAmI's allowed_methods: no propose permission, and bob cannot forget.
        no_kb = {"propose_memory", "search_knowledge"}
        assert await tool_names(alice) == ALL_TOOLS - no_kb
        assert await tool_names(bob) == ALL_TOOLS - no_kb - {"forget"}
        schema = next(t for t in (await alice.list_tools()).tools if t.name == "remember")
        assert schema.input_schema["required"] == ["content"]

        saved = await call(alice, "remember", content=f"Alice's build cache lives in {alice_word}")
        assert not saved.is_error, text_of(saved)
        alice_id = saved.structured_content["id"]
        assert alice_id in text_of(saved)
        bob_saved = await call(bob, "remember", content=f"Bob keeps release notes in {bob_word}")
        bob_id = bob_saved.structured_content["id"]

        recalled = await call(alice, "recall", query=alice_word)
        assert hit_ids(recalled) == [alice_id]
        assert alice_id in text_of(recalled) and "score" in text_of(recalled)
        # A neighbour may pass the similarity floor; the other user's id never may.
        assert alice_id not in hit_ids(await call(bob, "recall", query=alice_word))
        assert hit_ids(await call(bob, "recall", query=bob_word)) == [bob_id]
        assert bob_id not in hit_ids(await call(alice, "recall", query=bob_word))

        got = await call(alice, "get_memory", id=alice_id)
        assert got.structured_content["memory"]["content"].endswith(alice_word)
        hidden = await call(bob, "get_memory", id=alice_id)
        assert hidden.is_error and text_of(hidden).startswith("NOT_FOUND: ")
        own = await call(bob, "get_memory", id=bob_id)  # positive control
        assert own.structured_content["memory"]["content"].endswith(bob_word)

        forgotten = await call(alice, "forget", id=alice_id, reason="moved to a new cache host")
        assert not forgotten.is_error, text_of(forgotten)
        assert alice_id in text_of(forgotten)
        nothing = await call(alice, "recall", query=alice_word)
        assert hit_ids(nothing) == [] and text_of(nothing) == "No memories found."


async def test_grpc_errors_become_tool_errors_and_the_proxy_survives(
    brain_server: BrainServer,
) -> None:
    """Refusals and bad input are isError results with the server's message; later calls work."""
    ns = unique("ns")
    key = brain_server.mint_key(unique("t"), "agent:e", user="carol", namespaces=(ns,))
    async with mcp_session(brain_env(brain_server.target, key, "carol", ns)) as session:
        missing = await call(session, "get_memory", id="00000000-0000-0000-0000-000000000000")
        assert missing.is_error and text_of(missing).startswith("NOT_FOUND: ")
        assert missing.structured_content["error"] == "NOT_FOUND"

        empty = await call(session, "remember", content="")
        assert empty.is_error and "content" in text_of(empty)
        bad_time = await call(session, "remember", content="x", valid_from="last tuesday")
        assert bad_time.is_error and "ISO-8601" in text_of(bad_time)

        saved = await call(session, "remember", content="Carol reviews database migrations")
        assert not saved.is_error, text_of(saved)
        found = await call(session, "get_memory", id=saved.structured_content["id"])
        assert not found.is_error, text_of(found)  # the NOT_FOUND above was about the id

    # A proxy whose env scope leaves the key's confinement says which setting is wrong.
    async with mcp_session(brain_env(brain_server.target, key, "mallory", ns)) as wrong_scope:
        denied = await call(wrong_scope, "recall", query="migrations")
        assert denied.is_error and text_of(denied).startswith("PERMISSION_DENIED: ")
        assert "BRAIN_USER_ID is 'mallory'" in text_of(denied) and "'carol'" in text_of(denied)


async def test_proxy_reconnects_after_a_server_restart(brain_server: BrainServer) -> None:
    """A call while the server is down is a tool error; the same proxy works once it is back."""
    ns = unique("ns")
    key = brain_server.mint_key(unique("t"), "agent:r", namespaces=(ns,))
    marker = word()
    # The first embedding loads the server's model, which can outlast the proxy's 0.5 s.
    with BrainClient(brain_server.target, key, scope=Scope(namespace=ns)) as warm:
        warm.save("A warm-up note about the office plants")
    env = brain_env(brain_server.target, key, namespace=ns, BRAIN_TIMEOUT="0.5")
    async with mcp_session(env) as session:
        saved = await call(session, "remember", content=f"The VPN endpoint is {marker}")
        memory_id = saved.structured_content["id"]

        restart = asyncio.create_task(brain_server.restart(down_for=2.0))
        await asyncio.to_thread(wait_until_down, brain_server.target)
        down = await call(session, "recall", query=marker)
        assert down.is_error
        assert text_of(down).split(":")[0] in {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
        await restart

        deadline = time.monotonic() + 30
        while True:  # the channel reconnects on its own, within its reconnect backoff
            back = await call(session, "recall", query=marker)
            if not back.is_error or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert hit_ids(back) == [memory_id]


async def test_whoami_failure_at_start_is_retried_lazily(
    pg_cluster: PgCluster, loop_thread: LoopThread
) -> None:
    """Started before its server exists, the proxy lists every tool, then narrows once it is up."""
    port = free_port()
    server = BrainServer(
        cluster=pg_cluster,
        loop=loop_thread,
        settings=server_settings(pg_cluster, listen=f"127.0.0.1:{port}"),
    )
    key = server.mint_key(unique("t"), "agent:late", permissions="memories:read")
    env = brain_env(f"127.0.0.1:{port}", key, namespace="n", BRAIN_TIMEOUT="1")
    notifications: list[Any] = []
    async with mcp_session(env, notifications) as session:
        assert await tool_names(session) == ALL_TOOLS
        unreachable = await call(session, "recall", query="anything")
        assert unreachable.is_error and text_of(unreachable).startswith("UNAVAILABLE: ")
        await asyncio.to_thread(server.start)
        try:
            readable = {
                "recall",
                "list_memories",
                "get_memory",
                "memory_history",
                "get_memory_history",
                "list_candidates",
                "build_context",
                "lookup_entity",
                "entity_neighbours",
            }
            deadline = time.monotonic() + 30
            # The channel reconnects within its backoff; until then WhoAmI still fails.
            while (result := await call(session, "recall", query="anything")).is_error:
                assert time.monotonic() < deadline, text_of(result)
                await asyncio.sleep(0.2)
            assert hit_ids(result) == []
            # WhoAmI has been answered by now (during that call, or during this listing):
            # the list holds only what the key may call...
            assert await tool_names(session) == readable
            # ...and the host was told that the list it first saw has changed.
            for _ in range(300):
                if any(isinstance(n, types.ToolListChangedNotification) for n in notifications):
                    break
                await asyncio.sleep(0.1)
            assert any(isinstance(n, types.ToolListChangedNotification) for n in notifications)
            # A host that ignores the notice and calls a tool the key may not use is told
            # why, not that the tool does not exist (a name no tool has still is).
            with pytest.raises(MCPError, match="'remember' is not available to this API key"):
                await session.call_tool("remember", {"content": "x"})
            with pytest.raises(MCPError, match="unknown tool 'no_such_tool'"):
                await session.call_tool("no_such_tool", {})
        finally:
            await asyncio.to_thread(server.stop)


def run_hook(env: dict[str, str], payload: str) -> subprocess.CompletedProcess[str]:
    # The hook's own deadline (BRAIN_HOOK_TIMEOUT) is what keeps it quick; this limit only
    # turns a hang into a failure, with room for a slow, busy machine.
    return subprocess.run(
        [*BRAIN_MCP, "hook", "recall"],
        input=payload,
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", ""), **env},
        timeout=90,
    )


def test_hook_is_silent_and_fast_when_it_cannot_help(brain_server: BrainServer) -> None:
    """Server down or silent, bad key or bad payload: the hook prints nothing and exits 0."""
    payload = json.dumps({"prompt": "how do we deploy?", "session_id": "s1", "cwd": "/tmp"})
    key = brain_server.mint_key(unique("t"), "agent:h")
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        silent_target = f"127.0.0.1:{silent.getsockname()[1]}"
        cases = {
            "server down": (brain_env(f"127.0.0.1:{free_port()}", key, namespace="n"), payload),
            "server silent": (
                brain_env(silent_target, key, namespace="n", BRAIN_HOOK_TIMEOUT="1"),
                payload,
            ),
            "bad key": (brain_env(brain_server.target, key[:-3] + "zzz", namespace="n"), payload),
            "no key": (brain_env(brain_server.target, "", namespace="n"), payload),
            "not json": (brain_env(brain_server.target, key, namespace="n"), "{nope"),
        }
        for case, (env, stdin) in cases.items():
            done = run_hook(env, stdin)
            assert (done.returncode, done.stdout) == (0, ""), case
    # Positive control: the same key and server, with a prompt it can help with, print.
    marker = word()
    with BrainClient(brain_server.target, key, scope=Scope(namespace="n")) as c:
        c.save(f"Deploys go through the {marker} pipeline")
    helped = json.dumps({"prompt": f"Deploys through the {marker} pipeline?", "session_id": "s1"})
    done = run_hook(brain_env(brain_server.target, key, namespace="n"), helped)
    assert done.returncode == 0 and marker in done.stdout, done.stderr


def test_hook_prints_context_for_the_prompt(brain_server: BrainServer) -> None:
    """With a reachable server the hook prints BuildContext's block for the prompt's words."""
    ns, marker = unique("ns"), word()
    key = brain_server.mint_key(unique("t"), "agent:h", user="dora", namespaces=(ns,))
    with BrainClient(brain_server.target, key, scope=Scope(user_id="dora", namespace=ns)) as c:
        c.save(f"Deploys go through the {marker} pipeline")
        assert marker in c.build_context(marker).context
    # Every word of the prompt is in the memory: lexical recall alone (no embedder) ANDs them.
    payload = json.dumps({"prompt": f"Deploys through the {marker} pipeline?", "session_id": "s1"})
    done = run_hook(brain_env(brain_server.target, key, "dora", ns), payload)
    assert done.returncode == 0
    assert marker in done.stdout
    # A prompt past the server's 2,000-character query (a question, then a pasted log) got
    # nothing, silently: it is sent as its beginning and end, and the context still comes.
    pasted = f"Deploys through the {marker} pipeline? " + "pasted log line. " * 200
    done = run_hook(
        brain_env(brain_server.target, key, "dora", ns),
        json.dumps({"prompt": pasted + f" Is it still the {marker} pipeline?"}),
    )
    assert done.returncode == 0
    assert marker in done.stdout


async def test_client_and_proxy_speak_mtls(
    pg_cluster: PgCluster, loop_thread: LoopThread, tmp_path: Path
) -> None:
    """BrainClient (paths) and brain-mcp (BRAIN_TLS_*) reach an mTLS server; no cert is refused."""
    from brain.server.admin.certs import generate_dev_certs

    certs = generate_dev_certs(tmp_path / "certs", client_name="agent:tls")
    server = BrainServer(
        cluster=pg_cluster,
        loop=loop_thread,
        settings=server_settings(
            pg_cluster,
            tls_cert=certs.server_cert,
            tls_key=certs.server_key,
            tls_client_ca=certs.ca_cert,
        ),
    )
    await asyncio.to_thread(server.start)
    try:
        key = server.mint_key(unique("t"), "agent:tls", permissions="memories:read")
        target = server.target.replace("127.0.0.1", "localhost")
        mtls: dict[str, Any] = {
            "root_certificates": certs.ca_cert,
            "certificate_chain": certs.client_cert,
            "private_key": certs.client_key.read_bytes(),
        }
        with BrainClient(target, key, scope=Scope(namespace="n"), **mtls) as client:
            assert client.whoami().principal == "agent:tls"
        no_cert = BrainClient(target, key, root_certificates=certs.ca_cert.read_bytes(), timeout=2)
        with no_cert, pytest.raises(errors.Unavailable):
            no_cert.whoami()

        env = brain_env(
            target,
            key,
            namespace="n",
            BRAIN_TLS_CA=str(certs.ca_cert),
            BRAIN_TLS_CERT=str(certs.client_cert),
            BRAIN_TLS_KEY=str(certs.client_key),
        )
        async with mcp_session(env) as session:
            assert "recall" in await tool_names(session)
            assert "remember" not in await tool_names(session)
            assert hit_ids(await call(session, "recall", query="anything")) == []
    finally:
        await asyncio.to_thread(server.stop)


def test_a_tool_call_deadline_outlasts_the_restart_window_by_default() -> None:
    """With neither variable set, a tool call waits through a whole restart window (a
    deploy's restart took 7-14 s on a loaded 2-core machine) instead of failing at a 10 s
    deadline; each variable still sets its own value."""
    from brain.clients.mcp.config import ProxyConfig
    from brain.clients.mcp.main import _parser

    args = _parser().parse_args([])
    default = ProxyConfig.from_args(args, {"BRAIN_API_KEY": "k"})
    assert default.timeout > default.restart_window + 1  # the wait plus one reconnect
    env = {"BRAIN_API_KEY": "k", "BRAIN_TIMEOUT": "4", "BRAIN_RESTART_WINDOW": "2"}
    assert (
        ProxyConfig.from_args(args, env).timeout,
        ProxyConfig.from_args(args, env).restart_window,
    ) == (4.0, 2.0)
