"""Smoke run of an installed Shared Brain against a running brain-server.

    python tests/smoke.py --target HOST:PORT --key-file FILE [--tls-ca FILE] [--bin-dir DIR]

Run it with the Python of the installation under test: it imports only the installed
``brain`` package, the standard library and shared-brain's declared dependencies (the MCP
SDK), never the checkout or the tests package (its own folder is taken off ``sys.path``).

Steps, one line each on stdout (``smoke: ok <step>: <what was seen>``):

1. whoami    WhoAmI; the key must allow memories:read, memories:write, knowledge:read and
             knowledge:write (the dev key of ``BRAIN_DEV_KEY_FILE`` does). The run works in
             a fresh namespace ``smoke-<random>``, or in the key's own namespace, user and
             session when the key is confined to them.
2. save      SaveMemory of a sentence carrying a made-up word.
3. search    SearchMemories for that word finds the memory.
4. context   BuildContext for that word includes the sentence.
5. ingest    ``<bin-dir>/brain ingest`` of a small folder this script creates (two Markdown
             files) into a fresh collection; ListDocuments shows both, SearchKnowledge
             finds a made-up word of one of them.
6. graph     SaveMemory carrying a GraphDraft (an entity with an alias and a relation),
             then GraphService.LookupEntity by the alias returns the entity and relation.
7. conflict  Two SaveMemory calls, the second changing the first's port: its response
             names the first as the memory it may replace (issue 30).
8. mcp       ``<bin-dir>/brain-mcp`` spawned by the MCP SDK's stdio client lists its tools
             (remember, recall, build_context, lookup_entity, entity_neighbours,
             search_knowledge at least) and its ``recall`` finds the saved memory.

Options: ``--target`` host:port of the server; ``--key-file`` a file holding the API key
(surrounding whitespace ignored); ``--tls-ca`` a PEM root certificate, which turns TLS on
(for the script's own calls and the commands it starts); ``--bin-dir`` the folder of the
console scripts (default: the folder of this Python, i.e. the venv's ``bin``).

Exit status: 0 when every step passed; 1 at the first failed step, after one line
``smoke: FAIL <step>: <why>`` on stderr; 2 for a usage mistake (a missing key file, a
missing console script), also one line on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Never the checkout's tests folder: a module there must not stand in for an installed one.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import asyncio
import os
import secrets
import string
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import brain.clients
from brain.authz import package_version
from brain.clients import BrainClient, BrainClientError, Scope, graph_draft

NEEDED = ("memories:read", "memories:write", "knowledge:read", "knowledge:write")
MCP_TOOLS = {
    "remember",
    "recall",
    "build_context",
    "lookup_entity",
    "entity_neighbours",
    "search_knowledge",
}
COMMAND_TIMEOUT = 60.0  # seconds for `brain ingest` and the brain-mcp session
CALL_TIMEOUT = 30.0  # seconds for each RPC


class StepFailed(Exception):
    """A step saw something other than what it expects; the message says what."""


def word() -> str:
    """A made-up word that matches nothing but what this run stored."""
    return "smk" + "".join(secrets.choice(string.ascii_lowercase) for _ in range(9))


def check(condition: bool, message: str) -> None:
    if not condition:
        raise StepFailed(message)


@dataclass
class Smoke:
    target: str
    key: str
    tls_ca: Path | None
    bin_dir: Path
    scope: Scope | None = None
    memory_id: str = ""
    memory_word: str = ""

    def client(self, scope: Scope | None) -> BrainClient:
        tls: dict[str, Any] = {"root_certificates": self.tls_ca} if self.tls_ca else {}
        return BrainClient(self.target, self.key, scope=scope, timeout=CALL_TIMEOUT, **tls)

    def env(self) -> dict[str, str]:
        """The environment of the console scripts: the key and scope of this run."""
        assert self.scope is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("BRAIN_")}
        env.pop("PYTHONPATH", None)
        brain_env = {
            "BRAIN_TARGET": self.target,
            "BRAIN_API_KEY": self.key,
            "BRAIN_NAMESPACE": self.scope.namespace,
            "BRAIN_USER_ID": self.scope.user_id,
            "BRAIN_SESSION_ID": self.scope.session_id,
            "BRAIN_TLS_CA": str(self.tls_ca or ""),
        }
        return env | {k: v for k, v in brain_env.items() if v}

    # -- the steps ---------------------------------------------------------------------

    def whoami(self) -> str:
        with self.client(None) as client:
            me = client.whoami()
        missing = [p for p in NEEDED if p not in me.permissions]
        check(not missing, f"the key lacks {', '.join(missing)} (mint one with all of {NEEDED})")
        confined = me.confinement
        namespace = confined.namespaces[0] if confined.namespaces else f"smoke-{word()}"
        self.scope = Scope(
            namespace=namespace, user_id=confined.user_id, session_id=confined.session_id
        )
        return f"tenant {me.tenant_name}, principal {me.principal}, namespace {namespace}"

    def save(self) -> str:
        self.memory_word = word()
        content = f"The smoke test's codeword is {self.memory_word}."
        with self.client(self.scope) as client:
            saved = client.save(content, kind="fact", tags=["smoke"])
        check(saved.memory.content == content, f"saved content came back as {saved.memory!r}")
        self.memory_id = saved.memory.id
        return f"memory {self.memory_id}"

    def search(self) -> str:
        with self.client(self.scope) as client:
            hits = client.search(self.memory_word, limit=5).hits
        ids = [h.memory.id for h in hits]
        check(self.memory_id in ids, f"search for {self.memory_word} returned {ids}")
        return f"{len(hits)} hit(s), the saved memory at rank {ids.index(self.memory_id) + 1}"

    def context(self) -> str:
        with self.client(self.scope) as client:
            built = client.build_context(f"what is the codeword {self.memory_word}?")
        check(self.memory_word in built.context, f"context lacks the memory: {built.context!r}")
        return f"{len(built.context)} characters including the memory"

    def ingest(self) -> str:
        collection, needle = f"smoke-{word()}", word()
        files = {
            "guide.md": f"# Guide\n\n## Setup\n\nThe setup password hint is {needle}.\n",
            "notes/faq.md": "# FAQ\n\nSmoke tests run against an installed brain.\n",
        }
        with tempfile.TemporaryDirectory(prefix="brain-smoke-") as tmp:
            folder = Path(tmp) / "docs"
            for name, text in files.items():
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                (folder / name).write_text(text)
            command = [str(self.bin_dir / "brain"), "ingest", "docs", "--collection", collection]
            done = subprocess.run(
                command, cwd=tmp, env=self.env(), capture_output=True, text=True,
                timeout=COMMAND_TIMEOUT, check=False,
            )  # fmt: skip
        said = done.stderr.strip().splitlines()[-1:] or ["(nothing)"]
        check(done.returncode == 0, f"`brain ingest` exited {done.returncode}: {said[0]}")
        with self.client(self.scope) as client:
            paths = sorted(d.path for d in client.list_documents(collection=collection))
            found = client.search_knowledge(needle, collections=[collection], limit=5)
        check(paths == sorted(f"docs/{n}" for n in files), f"documents after ingest: {paths}")
        sources = [h.source.path for h in found.hits]
        check(sources[:1] == ["docs/guide.md"], f"knowledge search found {sources}")
        return f"{len(paths)} documents in {collection}; search finds docs/guide.md"

    def graph(self) -> str:
        tag = word()
        person, alias, project = f"Ada {tag}", f"ada-{tag}", f"Project {tag}"
        draft = graph_draft([(person, "person", [alias])], [(alias, "leads", project)])
        with self.client(self.scope) as client:
            client.save(f"{person} leads {project}.", graph=draft)
            found = client.lookup_entity(alias.upper())  # GraphService.LookupEntity
        relations = [(r.subject.name, r.predicate, r.object.name) for r in found.relations]
        check(found.entity.name == person, f"lookup of {alias} found {found.entity.name!r}")
        check(relations == [(person, "leads", project)], f"relations: {relations}")
        return f"entity {found.entity.id} ({person}) with relation leads -> {project}"

    def conflict(self) -> str:
        gateway = f"smoke gateway {word()}"
        with self.client(self.scope) as client:
            old = client.save(f"The {gateway} listens on port 7101.").memory.id
            new = client.save(f"The {gateway} now listens on port 7102.")
        named = [(c.older_id, c.newer_id) for c in new.conflicts]
        check(named == [(old, new.memory.id)], f"the update named conflicts {named}")
        return f"the update names {old} as the memory it may replace"

    def mcp(self) -> str:
        return asyncio.run(asyncio.wait_for(self._mcp(), COMMAND_TIMEOUT))

    async def _mcp(self) -> str:
        from mcp import ClientSession, StdioServerParameters, stdio_client

        params = StdioServerParameters(command=str(self.bin_dir / "brain-mcp"), env=self.env())
        async with (
            stdio_client(params) as (read_stream, write_stream),
            ClientSession(read_stream, write_stream) as session,
        ):
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            missing = sorted(MCP_TOOLS - names)
            check(not missing, f"brain-mcp lists {sorted(names)}; missing {missing}")
            recalled = await session.call_tool("recall", {"query": self.memory_word})
        structured = recalled.structured_content or {}
        ids = [h.get("id") for h in structured.get("hits", [])]
        check(
            not recalled.is_error and self.memory_id in ids,
            f"recall through brain-mcp returned {recalled.content!r}",
        )
        return f"{len(names)} tools listed; recall finds the saved memory"


def describe(exc: BaseException) -> str:
    """One line for a failure: the step's own message, else the exception's type and text
    (the leaves of an exception group, as the MCP SDK's task groups raise them)."""
    if isinstance(exc, StepFailed | BrainClientError):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return f"no answer within {COMMAND_TIMEOUT:.0f} s"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="smoke.py", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--target", required=True, help="host:port of a running brain-server")
    parser.add_argument("--key-file", required=True, type=Path, help="file holding an API key")
    parser.add_argument("--tls-ca", type=Path, help="PEM root certificate; turns TLS on")
    parser.add_argument(
        "--bin-dir", type=Path, default=Path(sys.executable).parent,
        help="folder of the console scripts (default: this Python's folder)",
    )  # fmt: skip
    return parser.parse_args(argv)


def usage_error(message: str) -> None:
    print(f"smoke: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        key = args.key_file.read_text().strip()
    except OSError as exc:
        usage_error(f"cannot read --key-file: {exc}")
    if args.tls_ca is not None and not args.tls_ca.is_file():
        usage_error(f"--tls-ca {args.tls_ca} is not a file")
    # The commands this script starts run in other folders.
    tls_ca = args.tls_ca.resolve() if args.tls_ca is not None else None
    bin_dir = args.bin_dir.resolve()
    for script in ("brain", "brain-mcp"):
        if not (bin_dir / script).is_file():
            usage_error(f"no {script} in --bin-dir {args.bin_dir}")
    package = Path(brain.clients.__file__).resolve().parent.parent
    print(f"smoke: brain {package_version()} from {package}", flush=True)
    smoke = Smoke(args.target, key, tls_ca, bin_dir)
    steps: list[tuple[str, Callable[[], str]]] = [
        ("whoami", smoke.whoami),
        ("save", smoke.save),
        ("search", smoke.search),
        ("context", smoke.context),
        ("ingest", smoke.ingest),
        ("graph", smoke.graph),
        ("conflict", smoke.conflict),
        ("mcp", smoke.mcp),
    ]
    started = time.monotonic()
    for name, step in steps:
        began = time.monotonic()
        try:
            seen = step()
        except Exception as exc:  # the report boundary: any failure is one line, then exit 1
            print(f"smoke: FAIL {name}: {describe(exc)}", file=sys.stderr)
            sys.exit(1)
        print(f"smoke: ok {name}: {seen} ({time.monotonic() - began:.1f} s)", flush=True)
    print(f"smoke: passed {len(steps)} steps in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
