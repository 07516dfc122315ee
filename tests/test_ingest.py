"""`brain ingest`: files into the knowledge base with the caller's key, only what changed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from brain.clients import BrainClient, Scope
from brain.clients.ingest import ingest, walk

from .conftest import BrainServer, unique

KB = "knowledge:read,knowledge:write,knowledge:delete"


def make_tree(root: Path) -> None:
    files = {
        ".gitignore": "build/\n*.log\n",
        "docs/guide.md": "# Guide\n\nInstall with make run.\n",
        "docs/notes.txt": "First paragraph.\n\nSecond paragraph.\n",
        "src/app.py": "def main():\n    return 1\n",
        "build/out.md": "# generated\n",
        "debug.log": "noise\n",
        "sub/.gitignore": "secret.md\n",
        "sub/secret.md": "# secret\n",
        "sub/ok.md": "# ok\n\nkept\n",
        ".git/config": "[core]\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "image.bin").write_bytes(b"\x89PNG\x00\x00binary")


def test_walk_honours_gitignore_files_at_every_level(tmp_path: Path) -> None:
    """Ignored folders, patterns and nested .gitignore rules are left out; the rest is kept."""
    make_tree(tmp_path)
    names = {p.relative_to(tmp_path).as_posix() for p in walk([tmp_path])}
    assert names == {
        ".gitignore", "docs/guide.md", "docs/notes.txt", "src/app.py", "sub/.gitignore",
        "sub/ok.md", "image.bin",
    }  # fmt: skip


def test_ingest_sends_only_changes_and_prunes(brain_server: BrainServer, tmp_path: Path) -> None:
    """The first run creates every text file; a second run sends nothing (same hashes, no new
    versions); after an edit and a removal, only the edited file is sent and --prune erases
    the removed one. Binary files are skipped, ignored ones never stored."""
    make_tree(tmp_path)
    key = brain_server.mint_key(unique("ing"), "dev", permissions=KB)
    with BrainClient(brain_server.target, key, scope=Scope(namespace="proj")) as client:
        first = ingest(client, [tmp_path], "repo", cwd=tmp_path)
        assert sorted(first.created) == [
            ".gitignore", "docs/guide.md", "docs/notes.txt", "src/app.py", "sub/.gitignore",
            "sub/ok.md",
        ]  # fmt: skip
        assert first.skipped == ["image.bin"] and first.failed == []
        stored = {d.path: d for d in client.list_documents(collection="repo")}
        assert "build/out.md" not in stored and "sub/secret.md" not in stored
        assert sorted(stored) == sorted(first.created)  # control: the listing holds the rest
        versions = brain_server.sql(
            "SELECT count(*) AS n FROM documents WHERE document_id = ANY($1::uuid[])",
            [d.id for d in stored.values()],
        )[0]["n"]

        second = ingest(client, [tmp_path], "repo", cwd=tmp_path)
        assert (second.created, second.updated, len(second.unchanged)) == ([], [], 6)
        again = brain_server.sql(
            "SELECT count(*) AS n FROM documents WHERE document_id = ANY($1::uuid[])",
            [d.id for d in stored.values()],
        )[0]["n"]
        assert again == versions  # nothing was written

        (tmp_path / "docs/guide.md").write_text("# Guide\n\nInstall with make run, then test.\n")
        (tmp_path / "src/app.py").unlink()
        third = ingest(client, [tmp_path / "docs", tmp_path / "src"], "repo", cwd=tmp_path,
                       prune=True)  # fmt: skip
        assert (third.updated, third.deleted) == (["docs/guide.md"], ["src/app.py"])
        assert "sub/ok.md" not in third.deleted  # outside the walked paths: not pruned
        left = {d.path for d in client.list_documents(collection="repo")}
        assert "src/app.py" not in left and {"docs/guide.md", "sub/ok.md"} <= left
        hits = client.search_knowledge("install test", collections=["repo"], lexical_only=True)
        assert hits.hits[0].source.path == "docs/guide.md"


def test_the_brain_command_runs_with_the_callers_key(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """`brain ingest` as a console script: scope from the key's confinement, a summary line,
    exit status 0; without a key it says what to set."""
    (tmp_path / "a.md").write_text("# A\n\nalpha\n")
    key = brain_server.mint_key(unique("ing"), "dev", permissions=KB, namespaces=("proj",))
    env = {**os.environ, "BRAIN_TARGET": brain_server.target, "BRAIN_API_KEY": key}
    command = [sys.executable, "-m", "brain.clients.ingest", "ingest", ".", "--collection", "c"]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "collection c: 1 created, 0 updated" in done.stderr
    env.pop("BRAIN_API_KEY")
    refused = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode != 0 and "BRAIN_API_KEY" in refused.stderr
