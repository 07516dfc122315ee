"""brain-mcp as an agent meets it: setup errors at start, strict arguments, typed results,
the list/update/history tools, a downed server and the session-capture hook.

Driven by the official MCP client over stdio against the real test server, like
tests/test_mcp_proxy.py; the capture hook runs as a subprocess on a real JSONL transcript.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.stdio import get_default_environment

from brain.clients import BrainClient, Scope, errors
from brain.clients.mcp.capture import explicit_requests

from .conftest import BrainServer, unique
from .helpers import JsonEndpoint, serving
from .test_mcp_proxy import (
    BRAIN_MCP,
    brain_env,
    call,
    free_port,
    hit_ids,
    run_hook,
    text_of,
    word,
)


@asynccontextmanager
async def started(
    env: dict[str, str], stderr: Path
) -> AsyncIterator[tuple[ClientSession, types.InitializeResult]]:
    """brain-mcp with `env`, its stderr in a file: the session and the initialize answer."""
    params = StdioServerParameters(command=BRAIN_MCP[0], args=BRAIN_MCP[1:], env=env)
    with stderr.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read_stream, write_stream),
            ClientSession(read_stream, write_stream) as session,
        ):
            yield session, await session.initialize()


async def test_the_key_alone_is_enough_when_it_fixes_user_and_namespace(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """Unset BRAIN_USER_ID/BRAIN_NAMESPACE are taken from a key confined to one of each."""
    ns, marker = unique("ns"), word()
    key = brain_server.mint_key(unique("t"), "agent:k", user="erin", namespaces=(ns,))
    async with started(brain_env(brain_server.target, key), tmp_path / "err") as (session, init):
        assert f"namespace {ns}, user erin" in (init.instructions or "")
        saved = await call(session, "remember", content=f"Erin's notebook lives in {marker}")
        assert not saved.is_error, text_of(saved)
        assert hit_ids(await call(session, "recall", query=marker)) == [
            saved.structured_content["id"]
        ]
    # The memory landed in erin's bucket of that namespace, where a direct client finds it.
    with BrainClient(brain_server.target, key, scope=Scope(user_id="erin", namespace=ns)) as c:
        assert c.get(saved.structured_content["id"]).memory.content.endswith(marker)
    # The recall hook takes the same scope from the key.
    prompt = json.dumps({"prompt": f"Where does Erin's notebook live, {marker}?"})
    hook = await asyncio.to_thread(run_hook, brain_env(brain_server.target, key), prompt)
    assert hook.returncode == 0 and marker in hook.stdout, hook.stderr


async def test_a_scope_that_does_not_fit_the_key_is_named_at_start(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """Wrong user, unset namespace among several, or a wrong key: stderr, instructions and
    every tool error say which setting is wrong; the right settings work."""
    ns1, ns2 = unique("ns"), unique("ns")
    tenant = unique("t")
    key = brain_server.mint_key(tenant, "agent:c", user="carol", namespaces=(ns1, ns2))

    wrong = brain_env(brain_server.target, key, user="mallory")
    async with started(wrong, tmp_path / "wrong") as (session, init):
        refused = await call(session, "recall", query="anything")
    said = (tmp_path / "wrong").read_text()
    for where in (init.instructions or "", said, text_of(refused)):
        assert "BRAIN_USER_ID is 'mallory'" in where and "'carol'" in where, where
        assert "BRAIN_NAMESPACE is unset" in where and ns1 in where and ns2 in where, where
    assert "MISCONFIGURED" in (init.instructions or "")
    assert refused.is_error and text_of(refused).startswith("PERMISSION_DENIED: ")

    bad_key = brain_env(brain_server.target, key[:-3] + "zzz", user="carol", namespace=ns1)
    async with started(bad_key, tmp_path / "bad") as (session, init):
        unknown = await call(session, "recall", query="anything")
    assert "refused BRAIN_API_KEY" in (init.instructions or "")
    assert "refused BRAIN_API_KEY" in (tmp_path / "bad").read_text()
    assert unknown.is_error and text_of(unknown).startswith("UNAUTHENTICATED: ")

    # A key free to use any namespace, with none set: saves were refused while recall read
    # the whole tenant, and nothing said why.
    free = brain_server.mint_key(tenant, "agent:free")
    async with started(brain_env(brain_server.target, free), tmp_path / "free") as (
        session,
        init,
    ):
        unset = await call(session, "remember", content="a fact with no namespace to land in")
    for where in (init.instructions or "", (tmp_path / "free").read_text(), text_of(unset)):
        assert "BRAIN_NAMESPACE is unset, and this key may use any namespace" in where, where
    assert unset.is_error

    # Positive control: the same keys with fitting settings work, and say nothing at start.
    for api_key, user, path in ((key, "carol", "right"), (free, "", "free-right")):
        right = brain_env(brain_server.target, api_key, user=user, namespace=ns1)
        async with started(right, tmp_path / path) as (session, init):
            assert "MISCONFIGURED" not in (init.instructions or "")
            ok = await call(session, "recall", query="anything")
            assert not ok.is_error, text_of(ok)
        assert "WARNING" not in (tmp_path / path).read_text()


async def test_arguments_outside_the_schema_are_refused(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """A model's user_id/namespace/tenant or unknown argument is an error that writes nothing."""
    ns, marker = unique("ns"), word()
    key = brain_server.mint_key(unique("t"), "agent:x", user="finn", namespaces=(ns,))
    async with started(brain_env(brain_server.target, key), tmp_path / "err") as (session, _):
        for extra in ({"user_id": "bob"}, {"namespace": "other"}, {"tenant": "acme"}):
            refused = await call(session, "remember", content=f"Finn uses {marker}", **extra)
            assert refused.is_error and text_of(refused).startswith("INVALID_ARGUMENT: ")
            assert "comes from brain-mcp's configuration" in text_of(refused), extra
        odd = await call(session, "recall", query=marker, colour="blue")
        assert odd.is_error and "unknown argument 'colour'" in text_of(odd)
        # Nothing was half-written, and the same calls without the extras work.
        assert hit_ids(await call(session, "recall", query=marker)) == []
        saved = await call(session, "remember", content=f"Finn uses {marker}")
        assert not saved.is_error, text_of(saved)
        assert hit_ids(await call(session, "recall", query=marker)) == [
            saved.structured_content["id"]
        ]


class RawSession:
    """brain-mcp spoken to in raw JSON-RPC lines: what a host may send but the official client
    would not (a string escape of half a surrogate pair). Each reply must come within 10 s."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self._last_id = 0

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        # json.dumps escapes a lone surrogate as "\ud800", exactly as a host's JSON would.
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._last_id += 1
        await self.send({"jsonrpc": "2.0", "id": self._last_id, "method": method, "params": params})
        assert self.process.stdout is not None
        async with asyncio.timeout(10):
            while True:  # skip notifications (tools/list_changed) until this call's reply
                line = await self.process.stdout.readline()
                assert line, "brain-mcp closed its stdout"
                reply: dict[str, Any] = json.loads(line)
                if reply.get("id") == self._last_id:
                    return reply

    async def tool(self, name: str, /, **arguments: Any) -> dict[str, Any]:
        reply = await self.request("tools/call", {"name": name, "arguments": arguments})
        assert "result" in reply, reply
        result: dict[str, Any] = reply["result"]
        return result


@asynccontextmanager
async def raw_session(env: dict[str, str], stderr: Path) -> AsyncIterator[RawSession]:
    """brain-mcp with `env` (plus what the SDK's client passes on), initialized by hand."""
    with stderr.open("w") as errlog:
        process = await asyncio.create_subprocess_exec(
            *BRAIN_MCP, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=errlog, env={**get_default_environment(), **env},
        )  # fmt: skip
        raw = RawSession(process)
        try:
            await raw.request(
                "initialize",
                {
                    "protocolVersion": types.LATEST_PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            )
            await raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            yield raw
        finally:
            assert process.stdin is not None
            process.stdin.close()
            try:
                async with asyncio.timeout(10):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()


def raw_text(result: dict[str, Any]) -> str:
    return "\n".join(c["text"] for c in result["content"] if c["type"] == "text")


async def test_text_that_is_not_unicode_is_refused_by_name(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """Half a surrogate pair ("\\ud800", valid JSON) in any string argument, nested ones too, is
    a tool error naming the argument; nothing is written, every call is answered, and the
    same calls with valid text work."""
    ns, marker = unique("ns"), word()
    key = brain_server.mint_key(unique("t"), "agent:u", user="uma", namespaces=(ns,))
    good = {
        "content": f"Uma deploys with {marker}",
        "kind": "fact",
        "tags": ["ops", "ci"],
        "about": [{"name": f"Uma{marker}", "type": "person"}],
    }
    broken = {
        "content": {**good, "content": f"Uma deploys with {marker} \ud800"},
        "kind": {**good, "kind": "fa\udc00ct"},
        "tags[1]": {**good, "tags": ["ops", "c\ud800i"]},
        "about[0].name": {**good, "about": [{"name": "Uma\ud83d", "type": "person"}]},
    }
    async with raw_session(brain_env(brain_server.target, key), tmp_path / "err") as raw:
        for where, arguments in broken.items():
            refused = await raw.tool("remember", **arguments)
            assert refused["isError"] is True, where
            assert raw_text(refused).startswith(
                f"INVALID_ARGUMENT: '{where}' is not valid Unicode text: it holds a lone "
                "surrogate (U+D"
            ), raw_text(refused)
            assert refused["structuredContent"]["error"] == "INVALID_ARGUMENT"
        asked = await raw.tool("recall", query=f"{marker} \ud800")
        assert asked["isError"] is True and "'query' is not valid Unicode text" in raw_text(asked)
        # Nothing was written, and the proxy still serves (the same calls with valid text).
        assert (await raw.tool("list_memories"))["structuredContent"]["memories"] == []
        saved = await raw.tool("remember", **good)
        assert not saved.get("isError"), raw_text(saved)
        found = await raw.tool("recall", query=marker)
        assert not found.get("isError"), raw_text(found)
        assert [h["id"] for h in found["structuredContent"]["hits"]] == [
            saved["structuredContent"]["id"]
        ]
        entity = await raw.tool("lookup_entity", name=f"Uma{marker}")
        assert not entity.get("isError"), raw_text(entity)
        listed = (await raw.tool("list_memories"))["structuredContent"]["memories"]
        assert [m["id"] for m in listed] == [saved["structuredContent"]["id"]]


async def test_build_context_offers_the_token_budget_the_server_takes(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """build_context's schema advertises the server's own largest token_budget: that budget
    works through the tool and the client, and one more is refused by both."""
    from brain.server.domain.context import MAX_TOKEN_BUDGET

    ns = unique("ns")
    key = brain_server.mint_key(unique("t"), "agent:b", user="bo", namespaces=(ns,))
    with BrainClient(brain_server.target, key, scope=Scope(user_id="bo", namespace=ns)) as c:
        c.save("Bo prefers short standups")
        built = c.build_context("standups", token_budget=MAX_TOKEN_BUDGET)
        assert built.tokens_used > 0
        with pytest.raises(errors.InvalidArgument, match="token_budget"):
            c.build_context("standups", token_budget=MAX_TOKEN_BUDGET + 1)
    async with started(brain_env(brain_server.target, key), tmp_path / "err") as (session, _):
        tools = {t.name: t for t in (await session.list_tools()).tools}
        budget = tools["build_context"].input_schema["properties"]["token_budget"]
        assert budget["maximum"] == MAX_TOKEN_BUDGET
        assert f"at most {MAX_TOKEN_BUDGET}" in budget["description"]
        most = await call(session, "build_context", query="standups", token_budget=MAX_TOKEN_BUDGET)
        assert not most.is_error and "short standups" in text_of(most)
        # An item's score is the server's ranking score, unclipped, and the schema says so
        # (clipped to 0..1 and called a relevance, it read as one).
        scores = [i["score"] for i in (most.structured_content or {})["items"]]
        assert scores == [round(i.score, 4) for i in built.items]
        score = tools["build_context"].output_schema["properties"]["items"]["items"]
        assert "not a calibrated relevance" in score["properties"]["score"]["description"]
        over = await call(
            session, "build_context", query="standups", token_budget=MAX_TOKEN_BUDGET + 1
        )
    assert over.is_error and text_of(over) == (
        f"INVALID_ARGUMENT: 'token_budget' must be an integer between 1 and {MAX_TOKEN_BUDGET}"
    )


async def test_every_tool_is_typed_and_recall_scores_read_0_to_1(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """Titles and output schemas on every tool (the client validates each result against
    them); get_memory and recall give the same memory object; min_score is the floor the
    best hit must reach (0..1)."""
    ns, marker = unique("ns"), word()
    key = brain_server.mint_key(unique("t"), "agent:s", user="gus", namespaces=(ns,))
    async with started(brain_env(brain_server.target, key), tmp_path / "err") as (session, _):
        tools = (await session.list_tools()).tools
        assert tools and all(t.title and t.output_schema for t in tools)
        memory_id = (
            await call(session, "remember", content=f"Gus deploys with {marker}", tags=["ops"])
        ).structured_content["id"]
        recalled = await call(session, "recall", query=marker)
        (hit,) = recalled.structured_content["hits"]
        got = await call(session, "get_memory", id=memory_id)
        assert got.structured_content["memory"] == hit["memory"]
        assert 0 < hit["score"] <= 1 and "keywords" in hit["matched_by"]

        kept = await call(session, "recall", query=marker, min_score=hit["score"])
        assert hit_ids(kept) == [memory_id]
        if hit["score"] < 1:
            above = min(1.0, hit["score"] + 0.001)
            assert hit_ids(await call(session, "recall", query=marker, min_score=above)) == []
        bad = await call(session, "recall", query=marker, min_score=1.5)
        assert bad.is_error and "min_score" in text_of(bad)


def _instant(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def test_list_update_history_and_filtered_recall(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """list_memories pages newest first; update_memory makes version 2 (history under both
    names); recall filters by tags, kind, valid_at and as_of."""
    ns, marker, new = unique("ns"), word(), word()
    key = brain_server.mint_key(unique("t"), "agent:l", user="hana", namespaces=(ns,))
    async with started(brain_env(brain_server.target, key), tmp_path / "err") as (session, _):
        ids = []
        for content, extra in (
            (f"The {marker} runbook lives in the wiki", {"tags": ["ops"], "kind": "fact"}),
            (f"Hana prefers {marker} dashboards dark", {"kind": "preference"}),
            (
                f"In 2020 the {marker} cluster ran on bare metal",
                {"valid_from": "2020-01-01", "valid_to": "2020-12-31"},
            ),
        ):
            saved = await call(session, "remember", content=content, **extra)
            assert not saved.is_error, text_of(saved)
            ids.append(saved.structured_content["id"])

        first = await call(session, "list_memories", limit=1)
        token = first.structured_content["next_page_token"]
        rest = await call(session, "list_memories", limit=5, page_token=token)
        listed = [m["id"] for m in first.structured_content["memories"]] + [
            m["id"] for m in rest.structured_content["memories"]
        ]
        # Newest first; the 2020 memory is not valid now, so only a valid_at read lists it.
        assert listed == [ids[1], ids[0]] and rest.structured_content["next_page_token"] == ""
        in_2020 = await call(session, "list_memories", valid_at="2020-06-01")
        assert [m["id"] for m in in_2020.structured_content["memories"]] == [ids[2]]

        assert hit_ids(await call(session, "recall", query=marker, tags=["ops"])) == [ids[0]]
        assert hit_ids(await call(session, "recall", query=marker, kind="preference")) == [ids[1]]
        recalled_now = hit_ids(await call(session, "recall", query=marker))
        assert ids[2] not in recalled_now
        assert {ids[0], ids[1]} <= set(recalled_now)  # positive control
        then = await call(session, "recall", query=marker, valid_at="2020-06-01T00:00:00Z")
        assert hit_ids(then) == [ids[2]]

        updated = await call(session, "update_memory", id=ids[0], content=f"The {new} runbook")
        assert not updated.is_error, text_of(updated)
        assert updated.structured_content["version"] == 2
        history = await call(session, "get_memory_history", id=ids[0])
        versions = history.structured_content["versions"]
        assert [v["version"] for v in versions] == [1, 2]
        old_name = await call(session, "memory_history", id=ids[0])
        assert old_name.structured_content == history.structured_content
        # as_of between the two versions: what the brain believed before the update. (Filters
        # pin the hit lists; a random word may still be an embedding neighbour of the new text,
        # so what is checked is which version of the memory comes back.)
        v1, v2 = (_instant(v["recorded_at"]) for v in versions)
        before = (v1 + (v2 - v1) / 2).isoformat()
        believed = await call(session, "recall", query=marker, tags=["ops"], as_of=before)
        assert [h["memory"]["content"] for h in believed.structured_content["hits"]] == [
            f"The {marker} runbook lives in the wiki"
        ]
        now = await call(session, "recall", query=marker, tags=["ops"])
        assert all(h["memory"]["version"] == 2 for h in now.structured_content["hits"])
        assert ids[0] in hit_ids(await call(session, "recall", query=new))

        nothing = await call(session, "update_memory", id=ids[0])
        assert nothing.is_error and "at least one field" in text_of(nothing)


async def test_a_downed_server_is_asked_again_by_every_call_and_warned_about_once(
    tmp_path: Path,
) -> None:
    """While the server cannot be reached, every call asks again and fails; warned about once."""
    # (This was "asked once": BRAIN_RECHECK_AFTER kept answering from a remembered outage,
    # which also refused calls for up to 2 s after a restarted server was healthy. The restart
    # rule in brain.clients._base replaced it; each call now costs at most about a second.)
    target = f"127.0.0.1:{free_port()}"  # nothing listens here
    key = "brk_" + "x" * 60
    err = tmp_path / "err"
    env = brain_env(target, key, namespace="n", BRAIN_MCP_DEBUG="1")
    async with started(env, err) as (session, init):
        assert "did not answer at start" in (init.instructions or "")
        for _ in range(3):
            down = await call(session, "recall", query="anything")
            assert down.is_error and text_of(down).startswith("UNAVAILABLE: ")
    said = err.read_text()
    assert said.count("asking WhoAmI") == 4  # at start, then once per call
    assert said.count("cannot be reached") == 1


# -- the session-capture hook --------------------------------------------------------------


def test_explicit_requests_are_the_users_imperative_sentences() -> None:
    """Only user sentences that ask to remember a statement count; questions and the assistant
    saying "remember" do not."""
    turns = [
        ("user", "Thanks. Please remember that the staging database is pg-2. Next step?"),
        ("user", "remember this: deploys go out on Tuesdays\nRemember when we broke prod?"),
        ("user", "Don't forget to run ruff before pushing."),
        ("user", "remember this"),
        ("assistant", "Remember that I always answer in French."),
    ]
    assert explicit_requests(turns) == [
        "The staging database is pg-2.",
        "Deploys go out on Tuesdays",
        "Don't forget to run ruff before pushing.",
    ]


def transcript(path: Path, *turns: tuple[str, Any], meta: str = "") -> Path:
    """A Claude Code style JSONL transcript of (role, content) turns."""
    lines = [{"type": role, "message": {"role": role, "content": c}} for role, c in turns]
    if meta:
        lines.append({"type": "user", "isMeta": True, "message": {"role": "user", "content": meta}})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def run_capture(env: dict[str, str], payload: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BRAIN_MCP, "hook", "capture"],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", ""), **env},
        timeout=90,
    )


def candidates(target: str, key: str, user: str, ns: str) -> dict[str, str]:
    """content -> proposal reason of the pending candidates a reviewer key sees."""
    with BrainClient(target, key, scope=Scope(user_id=user, namespace=ns)) as c:
        return {m.content: m.proposal_reason for m in c.list_candidates()}


def test_capture_proposes_what_the_user_asked_to_remember(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """Stop hook: the user's remember-this sentences become candidates in the tools' scope
    (taken from the key), none active; a second run over the same transcript adds nothing."""
    ns, tenant, marker, other = unique("ns"), unique("t"), word(), word()
    key = brain_server.mint_key(
        tenant,
        "agent:cap",
        permissions="memories:read,memories:propose",
        user="ida",
        namespaces=(ns,),
    )
    reviewer = brain_server.mint_key(
        tenant, "ida", permissions="memories:read,memories:review", user="ida", namespaces=(ns,)
    )
    path = transcript(
        tmp_path / "session.jsonl",
        ("user", f"Please remember that the {marker} service owns billing."),
        ("assistant", [{"type": "text", "text": f"Remember that {other} is my favourite."}]),
        ("user", [{"type": "tool_result", "content": f"remember that {other} leaked"}]),
        ("user", [{"type": "text", "text": f"remember: {marker} deploys need two approvals"}]),
        meta=f"Remember that {other} comes from a slash command.",
    )
    payload = {"session_id": "s-1", "transcript_path": str(path), "hook_event_name": "Stop"}
    done = run_capture(brain_env(brain_server.target, key), payload)
    assert done.returncode == 0 and "proposed 2 of 2" in done.stderr, done.stderr

    found = candidates(brain_server.target, reviewer, "ida", ns)
    assert set(found) == {
        f"The {marker} service owns billing.",
        f"{marker.capitalize()} deploys need two approvals",
    }
    assert all("asked to remember" in reason for reason in found.values())
    assert not any(other in content for content in found)
    with BrainClient(brain_server.target, key, scope=Scope(user_id="ida", namespace=ns)) as c:
        assert list(c.search(marker).hits) == []  # candidates are never recalled
        # Positive control: the same search finds an admitted memory of the same scope.
        writer = brain_server.mint_key(tenant, "ida", user="ida", namespaces=(ns,))
        with BrainClient(
            brain_server.target, writer, scope=Scope(user_id="ida", namespace=ns)
        ) as w:
            own = w.save(f"The {marker} dashboard is on the wiki").memory.id
        assert [h.memory.id for h in c.search(marker).hits] == [own]

    again = run_capture(brain_env(brain_server.target, key), payload)
    assert again.returncode == 0
    assert candidates(brain_server.target, reviewer, "ida", ns) == found


class ChatServer(JsonEndpoint):
    """A real OpenAI-style chat-completions server on 127.0.0.1 with a canned answer."""

    def __init__(self, answer: str, status: int = 200) -> None:
        super().__init__()
        self.canned, self.status = answer, status

    def answer(self, body: Any) -> tuple[int, Any]:
        message = {"role": "assistant", "content": self.canned}
        return self.status, {"choices": [{"message": message}]}


@pytest.fixture
def chat_server(request: pytest.FixtureRequest) -> Iterator[ChatServer]:
    answer, status = request.param
    with serving(ChatServer(answer, status)) as server:
        yield server


FACT = "The release train leaves every second Thursday."


@pytest.mark.parametrize(
    "chat_server",
    [("```json\n" + json.dumps({"memories": [FACT]}) + "\n```", 200), ("overloaded", 500)],
    indirect=True,
    ids=["answers", "fails"],
)
def test_capture_adds_a_chat_models_extraction(
    brain_server: BrainServer, tmp_path: Path, chat_server: ChatServer
) -> None:
    """With BRAIN_CAPTURE_URL the transcript goes to the chat endpoint and its facts become
    candidates too; when the endpoint fails, the explicit request is still proposed."""
    ns, tenant, marker = unique("ns"), unique("t"), word()
    key = brain_server.mint_key(
        tenant, "agent:llm", permissions="memories:propose", user="jo", namespaces=(ns,)
    )
    reviewer = brain_server.mint_key(
        tenant, "jo", permissions="memories:read,memories:review", user="jo", namespaces=(ns,)
    )
    path = transcript(
        tmp_path / "s.jsonl",
        ("user", "We ship on the release train; when does it leave?"),
        ("assistant", "Every second Thursday."),
        ("user", f"Remember that {marker} is the release manager."),
    )
    env = brain_env(
        brain_server.target,
        key,
        BRAIN_CAPTURE_URL=chat_server.url + "/v1",
        BRAIN_CAPTURE_MODEL="tiny",
        BRAIN_CAPTURE_API_KEY="sk-test",
    )
    done = run_capture(env, {"session_id": "s-2", "transcript_path": str(path)})
    assert done.returncode == 0, done.stderr

    (sent,) = chat_server.requests
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer sk-test"
    assert sent["body"]["model"] == "tiny"
    assert "Every second Thursday." in sent["body"]["messages"][-1]["content"]
    found = candidates(brain_server.target, reviewer, "jo", ns)
    explicit = f"{marker.capitalize()} is the release manager."
    if chat_server.status == 200:
        assert set(found) == {explicit, FACT}
        assert "Extracted by tiny" in found[FACT]
    else:
        assert set(found) == {explicit}
        assert "extraction at" in done.stderr


def test_capture_never_fails_the_agent(brain_server: BrainServer, tmp_path: Path) -> None:
    """Bad payload, missing transcript, server down, wrong key or no propose permission: the
    hook exits 0 and says why on stderr; with a fitting key the same transcript is proposed."""
    ns = unique("ns")
    tenant = unique("t")
    reader = brain_server.mint_key(tenant, "agent:r", user="kim", namespaces=(ns,))
    proposer = brain_server.mint_key(
        tenant, "agent:p", permissions="memories:propose", user="kim", namespaces=(ns,)
    )
    path = transcript(tmp_path / "t.jsonl", ("user", "Remember that the on-call phone is red."))
    good = {"session_id": "s-3", "transcript_path": str(path)}
    down = f"127.0.0.1:{free_port()}"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = {
        "not json": (brain_env(brain_server.target, proposer), "{nope", "not JSON"),
        "no transcript": (brain_env(brain_server.target, proposer), "{}", "transcript_path"),
        "missing file": (
            brain_env(brain_server.target, proposer),
            json.dumps({"transcript_path": str(tmp_path / "gone.jsonl")}),
            "cannot read transcript",
        ),
        "a fifo": (  # opening it blocked until the host's timeout
            brain_env(brain_server.target, proposer),
            json.dumps({"transcript_path": str(fifo)}),
            "not a regular file",
        ),
        "a device": (  # read whole, it never ended (or ran out of memory)
            brain_env(brain_server.target, proposer),
            json.dumps({"transcript_path": "/dev/zero"}),
            "not a regular file",
        ),
        "server down": (brain_env(down, proposer), json.dumps(good), "UNAVAILABLE"),
        "wrong key": (
            brain_env(brain_server.target, proposer[:-3] + "zzz"),
            json.dumps(good),
            "UNAUTHENTICATED",
        ),
        "no permission": (brain_env(brain_server.target, reader), json.dumps(good), "PERMISSION"),
    }
    for case, (env, stdin, why) in cases.items():
        done = subprocess.run(
            [*BRAIN_MCP, "hook", "capture"],
            input=stdin,
            capture_output=True,
            text=True,
            env={"PATH": os.environ.get("PATH", ""), **env},
            timeout=90,
        )
        assert done.returncode == 0 and why in done.stderr, (case, done.stderr)
        assert "proposed 1 of 1" not in done.stderr, case
    done = run_capture(brain_env(brain_server.target, proposer), good)
    assert "proposed 1 of 1" in done.stderr, done.stderr


async def test_recall_says_when_the_floor_silenced_it(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """In a bucket of 50 notes, a recall of words every note shares comes back silenced
    (not an error, not "no memories"), one of a note's own words finds it, and min_score 0
    shows the weak matches. The notes' stored vectors are set orthogonal to the query's,
    so what the model thinks of the notes' random words decides nothing."""
    from brain.server.domain.retrieval.embedders import LocalEmbedder

    from .helpers import Api
    from .test_relevance import _bucket

    key = brain_server.mint_key(
        tenant := unique("t"), "agent:f", user="ivy", namespaces=(ns := unique("ns"),)
    )
    async with brain_server.channel() as ch:
        saved = await _bucket(Api(ch, key, namespace=ns, user_id="ivy"))
    memory_id, a, b = saved[3]
    [asked] = await LocalEmbedder().embed(["service restarted"])
    apart = [0.0] * len(asked)
    apart[min(range(len(asked)), key=lambda i: abs(asked[i]))] = 1.0
    dot = sum(x * y for x, y in zip(apart, asked, strict=True))
    apart = [x - dot * y for x, y in zip(apart, asked, strict=True)]
    norm = sum(x * x for x in apart) ** 0.5
    brain_server.sql(
        """UPDATE memories m SET embedding = $1::float4[]::vector
           FROM tenants t WHERE t.tenant_id = m.tenant_id AND t.name = $2""",
        [x / norm for x in apart], tenant,
    )  # fmt: skip
    async with started(brain_env(brain_server.target, key), tmp_path / "err") as (session, _):
        weak = await call(session, "recall", query="service restarted", limit=5)
        strong = await call(session, "recall", query=f"{a} {b}")
        shown = await call(session, "recall", query="service restarted", limit=5, min_score=0)
    assert not weak.is_error and weak.structured_content["silenced"] is True
    assert weak.structured_content["hits"] == [] and weak.structured_content["below_floor"] == 5
    assert text_of(weak).startswith("Nothing relevant enough")
    assert hit_ids(strong)[0] == memory_id and strong.structured_content["silenced"] is False
    assert strong.structured_content["ranking"] == "fused"
    assert len(hit_ids(shown)) == 5 and shown.structured_content["silenced"] is False


def test_a_long_transcript_is_read_from_its_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The capture hook held a whole transcript in memory; it reads the last part only (8
    MiB; here 2 KiB), whole lines of it: the latest turns, never half a line."""
    from brain.clients.mcp import capture

    monkeypatch.setattr(capture, "TRANSCRIPT_TAIL_BYTES", 2048)
    turns = [("assistant", f"turn number {i} of a long session") for i in range(200)]
    path = transcript(tmp_path / "long.jsonl", *turns, ("user", "Remember the vault is blue."))
    read = capture.read_transcript(path)
    assert read[-1] == ("user", "Remember the vault is blue.")
    assert 10 < len(read) < 40 and read[0][1].startswith("turn number ")  # whole lines only
    short = transcript(tmp_path / "short.jsonl", ("user", "Remember the door is green."))
    assert capture.read_transcript(short) == [("user", "Remember the door is green.")]


def test_a_whole_number_written_as_a_float_is_an_integer() -> None:
    """JSON Schema's "integer" admits 5.0 (some hosts send every number as a float); it was
    refused. 5.5, true and out-of-range values still are."""
    from brain.clients.mcp._arguments import _integer
    from brain.clients.mcp.tools import ToolInputError

    assert _integer({"limit": 5.0}, "limit", low=1, high=50, default=10) == 5
    assert _integer({}, "limit", low=1, high=50, default=10) == 10
    for bad in (5.5, True, 0, 51.0, "5"):
        with pytest.raises(ToolInputError, match="'limit' must be an integer between 1 and 50"):
            _integer({"limit": bad}, "limit", low=1, high=50, default=10)
