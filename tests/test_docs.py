"""The documentation stays true: the site builds --strict, the README stays a front door,
and every Python and shell example in the README and docs/ runs against a real server.

The harness reads each fenced ``python`` and ``sh`` block. A block runs in a scratch
folder laid out like a checkout (``.venv/bin`` is this venv's, ``.brain/dev-key`` a key
with every permission) against this session's server and database, with a few documented
substitutions: the address ``127.0.0.1:50051`` becomes the test server's, the tenant
``acme`` a fresh tenant per page, ``<key id>`` a key id of that tenant, ``brk_…`` a key,
and an optional ``[--flag value]`` is passed. A block that cannot run here says why in a
``<!-- docs-test: skip: REASON -->`` line before it; blocks of ``make`` commands are what
CI itself runs. Every block, run or skipped, also has each ``--flag`` it gives a console
script checked against that command's ``--help``, so a renamed flag fails a test.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from .conftest import BrainServer, unique

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SKIP = re.compile(r"<!-- docs-test: skip: (.+?) -->\s*$")
COMMANDS = ("brain-admin", "brain-server", "brain-mcp", "brain-eval", "brain-bench", "brain")
README_MAX_LINES = 250


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    body: str
    skip: str  # why it is not run here; "" when it runs

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def is_make(self) -> bool:
        return all(
            not ln.strip() or ln.lstrip().startswith(("make ", "#"))
            for ln in self.body.splitlines()
        )


def blocks() -> list[Block]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for match in FENCE.finditer(text):
            lang = match.group(1)
            if lang not in ("python", "sh"):
                continue
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            skip = SKIP.search(before)
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(path, line, lang, match.group(2), skip.group(1) if skip else ""))
    return found


BLOCKS = blocks()
RUNNABLE = [b for b in BLOCKS if not b.skip and not b.is_make]


def command_lines(body: str) -> list[list[str]]:
    """Each shell command of a block as words (continuations joined, comments dropped)."""
    joined = re.sub(r"\\\n\s*", " ", body)
    out = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        line = re.sub(r"\[(--[^\]]+)\]", r"\1", line)  # optional flags: pass them
        try:
            out.append(shlex.split(line))
        except ValueError:
            continue
    return out


@cache
def help_text(command: tuple[str, ...]) -> str:
    """``<command> --help``, asked of the console script's entry point in this process."""
    (entry,) = entry_points(group="console_scripts", name=command[0])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        entry.load()([*command[1:], "--help"])
    return out.getvalue()


def invocations(block: Block) -> list[tuple[tuple[str, ...], list[str]]]:
    """(command with its sub-commands, the flags it is given) for each console script."""
    out = []
    for words in command_lines(block.body):
        words = [w for w in words if not re.fullmatch(r"[A-Z_]+=.*", w)]  # VAR=value
        if not words:
            continue
        name = Path(words[0]).name
        if name not in COMMANDS:
            continue
        command = [name]
        for word in words[1:]:
            if word.startswith("-") or not re.fullmatch(r"[a-z][a-z-]*", word):
                break
            if re.search(rf"^\s+{{?[\w,-]*\b{word}\b", help_text(tuple(command)), re.M):
                command.append(word)
            else:
                break
        flags = [w.split("=", 1)[0] for w in words[1:] if w.startswith("--")]
        out.append((tuple(command), flags))
    return out


def test_the_readme_is_a_front_door() -> None:
    """README.md stays under 250 lines and points at the documentation."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    assert "docs/index.md" in text and "make run" in text and "make test" in text


def test_every_server_flag_is_in_the_configuration_table() -> None:
    """Every flag brain-server takes is in docs/operations/configuration.md (a flag added
    without its row is a setting an operator cannot find)."""
    import argparse

    from brain.server.runtime.config import add_server_arguments

    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    flags = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
    assert "--listen" in flags and "--reranker-url" in flags  # the parser was read
    table = (ROOT / "docs" / "operations" / "configuration.md").read_text()
    documented = set(re.findall(r"`(--[a-z0-9-]+)", table))
    assert sorted(flags - {"--help"} - documented) == []


def test_the_site_builds_strict(tmp_path: Path) -> None:
    """mkdocs build --strict: no broken link or anchor, the API pages generated from the
    protos, the client reference from the docstrings."""
    done = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    memory = (tmp_path / "site" / "api" / "memory" / "index.html").read_text()
    assert "SaveMemoryRequest" in memory and "idempotency_key" in memory
    reference = (tmp_path / "site" / "clients" / "reference" / "index.html").read_text()
    assert "build_context" in reference and "RetryPolicy" in reference


def test_every_example_is_run_or_says_why_not() -> None:
    """Blocks are found (positive control), and each one either runs or names its reason."""
    assert len(RUNNABLE) >= 8
    for block in BLOCKS:
        assert block.skip or block.is_make or block in RUNNABLE, block.name


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_every_flag_an_example_gives_exists(block: Block) -> None:
    """Each --flag given to a console script in an example appears in its --help."""
    for command, flags in invocations(block):
        text = help_text(command)
        assert text, f"{' '.join(command)} --help printed nothing"
        for flag in flags:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}\b", text), (
                f"{block.name}: {' '.join(command)} has no {flag}"
            )


@pytest.fixture
def workspace(tmp_path: Path, brain_server: BrainServer) -> tuple[Path, dict[str, str]]:
    """A folder laid out like a checkout after `make run`, and the environment to run in."""
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "bin").symlink_to(BIN, target_is_directory=True)
    (tmp_path / ".brain").mkdir()
    every = "memories:read,memories:write,memories:forget,knowledge:read,knowledge:write"
    dev = brain_server.mint_key(unique("local"), "dev", permissions=every)
    (tmp_path / ".brain" / "dev-key").write_text(dev + "\n")
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "BRAIN_ADMIN_DATABASE_URL": brain_server.cluster.owner_dsn,
        "BRAIN_PEPPER_FILE": str(brain_server.cluster.pepper_file),
        "BRAIN_TARGET": brain_server.target,
        "BRAIN_EMBEDDER": "none",
    }
    env.pop("BRAIN_DATABASE_URL", None)
    return tmp_path, env


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.name for b in RUNNABLE])
def test_the_example_runs(
    block: Block, workspace: tuple[Path, dict[str, str]], brain_server: BrainServer
) -> None:
    """The example runs to its end against a real server and database (exit 0)."""
    folder, env = workspace
    tenant = unique("acme")
    other = brain_server.mint_key(  # for `<key id>` and `brk_…`
        unique("keys"), "agent:docs", permissions="memories:read,knowledge:read,knowledge:write"
    )
    body = block.body.replace("127.0.0.1:50051", brain_server.target)
    if block.lang == "python":
        command = [sys.executable, "-c", body]
    else:
        if not re.search(r"tenants create acme\b", body):  # the page's tenant exists
            brain_server.mint_key(tenant, "agent:docs")
        body = re.sub(r"\bacme\b", tenant, body)
        body = body.replace("<key id>", other.split("_")[1]).replace("brk_…", other)
        body = re.sub(r"\[(--[^\]]+)\]", r"\1", body)
        for folder_name in re.findall(r"\b(docs|src)/", body):  # folders an example ingests
            (folder / folder_name).mkdir(exist_ok=True)
            (folder / folder_name / "notes.md").write_text("# Notes\n\nStaging uses port 5433.\n")
        command = ["bash", "-euo", "pipefail", "-c", body]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{block.name}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
