"""`brain ingest`: files into the knowledge base with the caller's key, only what changed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from brain.clients import BrainClient, Scope
from brain.clients import ingest as ingest_module
from brain.clients.errors import RateLimited
from brain.clients.ingest import ingest, walk
from brain.server.errors import NotImplementedYet

from .conftest import BrainServer, LoopThread, PgCluster, fillers_held, server_settings, unique

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
    (tmp_path / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (tmp_path / "latin.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    key = brain_server.mint_key(unique("ing"), "dev", permissions=KB, namespaces=("proj",))
    env = {**os.environ, "BRAIN_TARGET": brain_server.target, "BRAIN_API_KEY": key}
    command = [sys.executable, "-m", "brain.clients.ingest", "ingest", ".", "--collection", "c"]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "collection c: 1 created, 0 updated, 0 unchanged, 0 deleted, 2 skipped" in done.stderr
    assert "skipped: latin.txt (not UTF-8)" in done.stderr
    assert "skipped: logo.png (binary)" in done.stderr
    env.pop("BRAIN_API_KEY")
    refused = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode != 0 and "BRAIN_API_KEY" in refused.stderr


def test_ingest_puts_several_files_a_call_and_several_calls_at_once(
    brain_server: BrainServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files go in PutDocuments calls of several files (here at most 3), and with --jobs 4
    four calls are in the server at once (each waits there, up to a generous bound, for
    the others); progress is told of every file with its size, the skipped files are named
    with their reasons, and a re-ingest of the unchanged tree sends nothing."""
    if brain_server.running is None:
        pytest.skip("observes the in-process server's puts")
    monkeypatch.setattr(ingest_module, "BATCH_FILES", 3)
    for n in range(12):
        (tmp_path / f"doc{n:02}.md").write_text(f"# Doc {n}\n\nbody {n}\n")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02")
    (tmp_path / "empty.md").write_text("\n\n")
    (tmp_path / "huge.md").write_text("x" * (1024 * 1024 + 1))
    knowledge = brain_server.running.knowledge
    assert knowledge is not None
    original = knowledge.put_many
    state = {"now": 0, "max": 0, "calls": 0, "documents": 0, "largest": 0}

    async def observed_put_many(caller: Any, request: Any, *args: Any) -> Any:
        state["now"] += 1
        state["calls"] += 1
        state["documents"] += len(request.documents)
        state["largest"] = max(state["largest"], len(request.documents))
        state["max"] = max(state["max"], state["now"])
        try:
            for _ in range(100):  # until four are in flight (or 10 s: then the assert fails)
                if state["max"] >= 4:
                    break
                await asyncio.sleep(0.1)
            return await original(caller, request, *args)
        finally:
            state["now"] -= 1

    class Seen:
        def __init__(self, files: int, nbytes: int) -> None:
            self.total = (files, nbytes)
            self.advanced: list[int] = []

        def advance(self, nbytes: int) -> None:
            self.advanced.append(nbytes)

    shown: list[Seen] = []

    def progress(files: int, nbytes: int) -> Seen:
        shown.append(Seen(files, nbytes))
        return shown[-1]

    key = brain_server.mint_key(unique("ing"), "dev", permissions=KB)
    knowledge.put_many = observed_put_many  # type: ignore[method-assign]
    try:
        with BrainClient(brain_server.target, key, scope=Scope(namespace="proj")) as client:
            report = ingest(client, [tmp_path], "repo", cwd=tmp_path, jobs=4, progress=progress)
            again = ingest(client, [tmp_path], "repo", cwd=tmp_path, jobs=4)
    finally:
        del knowledge.put_many
    assert state["max"] == 4
    # 15 files in 5 calls of up to 3; the skipped ones are never sent.
    assert (state["calls"], state["documents"], state["largest"]) == (5, 12, 3)
    assert len(again.unchanged) == 12 and again.created == again.updated == []
    assert report.created == [f"doc{n:02}.md" for n in range(12)] and report.failed == []
    assert report.skipped == ["blob.bin", "empty.md", "huge.md"]
    assert report.why_skipped == {
        "blob.bin": "binary",
        "empty.md": "empty",
        "huge.md": "over 1 MiB",
    }
    sizes = sorted(p.stat().st_size for p in tmp_path.iterdir())
    assert shown[0].total == (15, sum(sizes)) and sorted(shown[0].advanced) == sizes
    assert report.sent_bytes == sum((tmp_path / n).stat().st_size for n in report.created)
    assert "skipped: huge.md (over 1 MiB)" in report.summary()


def test_a_call_refused_whole_is_sent_again_file_by_file(
    brain_server: BrainServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file the server finds invalid (here a Markdown file with more headings than a
    document may have) refuses its whole PutDocuments call: ingest sends that call's files
    one by one, so the report fails that file alone, naming it, and the others of the call
    are stored (control)."""
    monkeypatch.setattr(ingest_module, "BATCH_FILES", 3)
    (tmp_path / "a.md").write_text("# A\n\nfirst\n")
    (tmp_path / "b.md").write_text("".join(f"# H{i}\n" for i in range(2001)))
    (tmp_path / "c.md").write_text("# C\n\nthird\n")
    key = brain_server.mint_key(unique("ing"), "dev", permissions=KB)
    with BrainClient(brain_server.target, key, scope=Scope(namespace="proj")) as client:
        report = ingest(client, [tmp_path], "repo", cwd=tmp_path)
        stored = {d.path for d in client.list_documents(collection="repo")}
    assert report.created == ["a.md", "c.md"]
    assert len(report.failed) == 1 and report.failed[0].startswith("b.md: ")
    assert "heading" in report.failed[0]
    assert stored == {"a.md", "c.md"}


def test_a_server_without_put_documents_gets_one_file_per_call(
    brain_server: BrainServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server from before PutDocuments (a rolling deploy) answers it UNIMPLEMENTED: ingest
    asks once, then puts every file with PutDocument, and every file is stored."""
    if brain_server.running is None:
        pytest.skip("replaces the in-process server's handlers")
    monkeypatch.setattr(ingest_module, "BATCH_FILES", 2)
    for n in range(5):
        (tmp_path / f"doc{n}.md").write_text(f"# Doc {n}\n\nolder server {n}\n")
    knowledge = brain_server.running.knowledge
    assert knowledge is not None
    original = knowledge.put
    calls = {"many": 0, "one": 0}

    async def unknown(*args: Any) -> Any:
        calls["many"] += 1
        raise NotImplementedYet("PutDocuments: not in this release")

    async def one(*args: Any) -> Any:
        calls["one"] += 1
        return await original(*args)

    monkeypatch.setattr(knowledge, "put_many", unknown)
    monkeypatch.setattr(knowledge, "put", one)
    key = brain_server.mint_key(unique("ing"), "dev", permissions=KB)
    with BrainClient(brain_server.target, key, scope=Scope(namespace="proj")) as client:
        report = ingest(client, [tmp_path], "repo", cwd=tmp_path, jobs=1)
        stored = {d.path for d in client.list_documents(collection="repo")}
    assert calls == {"many": 1, "one": 5}
    assert report.created == [f"doc{n}.md" for n in range(5)] and report.failed == []
    assert stored == {f"doc{n}.md" for n in range(5)}


def test_ingest_waits_for_a_rate_limit_only() -> None:
    """A RESOURCE_EXHAUSTED with a retry delay (the rate limit) is waited out and the call
    made again; one without (a quota, a full disk) is raised at once: waiting changes
    nothing."""
    calls: list[int] = []

    def limited_twice() -> str:
        calls.append(1)
        if len(calls) <= 2:
            raise RateLimited("rate limit exceeded", retry_after=0.01)
        return "done"

    assert ingest_module.patiently(limited_twice) == "done" and len(calls) == 3

    def over_quota() -> str:
        calls.append(1)
        raise RateLimited("quota documents exceeded", retry_after=None)

    calls.clear()
    with pytest.raises(RateLimited, match="quota"):
        ingest_module.patiently(over_quota)
    assert len(calls) == 1


def test_a_pruned_file_that_comes_back_is_held_until_ingest_readmits_it(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """--prune erases a removed file's document and so leaves a tombstone: when the file comes
    back (a branch switched back), ingest fails it, naming the tombstone and the flag, and
    puts the other files (control); --readmit-tombstoned puts it back."""
    (tmp_path / "keep.md").write_text("# Keep\n\nstays\n")
    (tmp_path / "gone.md").write_text("# Gone\n\ncomes back later\n")
    key = brain_server.mint_key(unique("ing"), "dev", permissions=KB)
    with BrainClient(brain_server.target, key, scope=Scope(namespace="proj")) as client:
        ingest(client, [tmp_path], "repo", cwd=tmp_path)
        saved = (tmp_path / "gone.md").read_text()
        (tmp_path / "gone.md").unlink()
        assert ingest(client, [tmp_path], "repo", cwd=tmp_path, prune=True).deleted == ["gone.md"]
        (tmp_path / "gone.md").write_text(saved)
        (tmp_path / "new.md").write_text("# New\n\nnever deleted\n")
        held = ingest(client, [tmp_path], "repo", cwd=tmp_path)
        assert held.created == ["new.md"] and len(held.failed) == 1
        assert held.failed[0].startswith("gone.md: ") and "--readmit-tombstoned" in held.failed[0]
        back = ingest(client, [tmp_path], "repo", cwd=tmp_path, readmit_tombstoned=True)
        assert back.created == ["gone.md"] and back.failed == []


def test_an_empty_collection_is_refused_and_prunes_nothing_of_other_collections(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """An empty --collection (a blank shell variable) listed every collection, so --prune
    erased another collection's document whose file was gone. Now it is refused naming
    --collection, and that document stays; the same prune with its own collection does
    erase it (the positive control)."""
    key = brain_server.mint_key(unique("ing"), "dev", permissions=KB, namespaces=("proj",))
    env = {**os.environ, "BRAIN_TARGET": brain_server.target, "BRAIN_API_KEY": key}
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "kept.md").write_text("# Kept\n\nstays\n")
    (tmp_path / "docs" / "gone.md").write_text("# Gone\n\nits file is deleted\n")

    def brain(collection: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "brain.clients.ingest", "ingest", "docs", "--prune",
                   "--collection", collection]  # fmt: skip
        return subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
            check=False,
        )  # fmt: skip

    assert brain("c3").returncode == 0
    (tmp_path / "docs" / "gone.md").unlink()
    refused = brain("")
    assert refused.returncode != 0 and "--collection" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    with BrainClient(brain_server.target, key, scope=Scope(namespace="proj")) as client:
        assert sorted(d.path for d in client.list_documents(collection="c3")) == [
            "docs/gone.md", "docs/kept.md"
        ]  # fmt: skip
        with pytest.raises(ValueError, match="collection"):
            ingest(client, [tmp_path / "docs"], "", prune=True, cwd=tmp_path)
        done = brain("c3")
        assert done.returncode == 0 and "1 deleted" in done.stderr, done.stderr
        assert [d.path for d in client.list_documents(collection="c3")] == ["docs/kept.md"]


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file names must be UTF-8")
def test_a_file_name_that_is_not_text_is_skipped_and_named_escaped(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """A file name that is not UTF-8 crashed ingest half way (a traceback, no summary, the
    rest unsent); one with an escape sequence was printed raw, recolouring the terminal.
    Both are skipped and named with escapes; the other files are stored."""
    key = brain_server.mint_key(unique("ing"), "dev", permissions=KB, namespaces=("proj",))
    env = {**os.environ, "BRAIN_TARGET": brain_server.target, "BRAIN_API_KEY": key}
    (tmp_path / "a.md").write_text("# A\n\nalpha\n")
    (tmp_path / "z.md").write_text("# Z\n\nzeta\n")
    (tmp_path / os.fsdecode(b"bad\xffname.md")).write_text("# Bad\n\nname\n")
    (tmp_path / "red\x1b[31m.md").write_text("# Red\n\nname\n")
    command = [sys.executable, "-m", "brain.clients.ingest", "ingest", ".", "--collection", "c"]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "2 created, 0 updated, 0 unchanged, 0 deleted, 2 skipped, 0 failed" in done.stderr
    assert "skipped: bad\\xffname.md (its name is not UTF-8" in done.stderr
    assert "skipped: red\\x1b[31m.md (its name is not UTF-8" in done.stderr
    assert "\x1b" not in done.stderr
    with BrainClient(brain_server.target, key, scope=Scope(namespace="proj")) as client:
        assert sorted(d.path for d in client.list_documents(collection="c")) == ["a.md", "z.md"]


def test_symbolic_links_are_named_as_skipped_never_followed(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """Links in a folder (a loop, a dangling one, one to a file) were left out without a
    word, and a looping link named on the command line was "no such file". Each is skipped
    and named with its reason; a link named on the command line that leads to a file is
    read; the folder's plain files are stored."""
    key = brain_server.mint_key(unique("ing"), "dev", permissions=KB, namespaces=("proj",))
    env = {**os.environ, "BRAIN_TARGET": brain_server.target, "BRAIN_API_KEY": key}
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "plain.md").write_text("# Plain\n\na plain file\n")
    (tmp_path / "outside.md").write_text("# Outside\n\nreached through a link\n")
    (docs / "loop-a.md").symlink_to(docs / "loop-b.md")
    (docs / "loop-b.md").symlink_to(docs / "loop-a.md")
    (docs / "dangling.md").symlink_to(tmp_path / "nowhere.md")
    (docs / "to-file.md").symlink_to(tmp_path / "outside.md")
    (tmp_path / "named.md").symlink_to(tmp_path / "outside.md")

    def ingest(*paths: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "brain.clients.ingest", "ingest", *paths]
        return subprocess.run(
            [*command, "--collection", "c"], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=60, check=False,
        )  # fmt: skip

    done = ingest("docs", "named.md")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "2 created, 0 updated, 0 unchanged, 0 deleted, 4 skipped, 0 failed" in done.stderr
    for link in ("loop-a.md", "loop-b.md", "dangling.md", "to-file.md"):
        assert f"skipped: docs/{link} (a symbolic link, not followed)" in done.stderr
    done = ingest("docs/loop-a.md")  # a loop named: skipped and named, not "no such file"
    assert done.returncode == 0, done.stderr
    assert "skipped: docs/loop-a.md (a symbolic link, not followed)" in done.stderr
    with BrainClient(brain_server.target, key, scope=Scope(namespace="proj")) as client:
        stored = {d.path for d in client.list_documents(collection="c")}
    assert stored == {"docs/plain.md", "named.md"}


def test_a_prune_from_the_wrong_folder_deletes_nothing_and_says_why(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """Documents are named relative to the current folder: `brain ingest . --prune` run
    inside a subfolder saw every stored document as gone and erased the collection, whose
    tombstones then refused the files back. A prune that would delete documents while the
    run found none of the stored ones (or more than it found, past 10) puts and deletes
    nothing, says why and exits 1, however often it is run; --force-prune deletes; an
    ordinary prune deletes as before."""
    key = brain_server.mint_key(unique("ing"), "dev", permissions=KB, namespaces=("proj",))
    env = {**os.environ, "BRAIN_TARGET": brain_server.target, "BRAIN_API_KEY": key}
    for folder in ("docs", "src"):
        (tmp_path / folder).mkdir()
        for i in range(3):
            (tmp_path / folder / f"{folder}{i}.md").write_text(f"# {folder} {i}\n\ntext {i}\n")

    def ingest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "brain.clients.ingest", "ingest", *args]
        return subprocess.run(
            [*command, "--collection", "c"], cwd=cwd, env=env, capture_output=True,
            text=True, timeout=60, check=False,
        )  # fmt: skip

    def stored() -> set[str]:
        with BrainClient(brain_server.target, key, scope=Scope(namespace="proj")) as client:
            return {d.path for d in client.list_documents(collection="c")}

    assert ingest(tmp_path, "docs", "src").returncode == 0
    everything = {f"{f}/{f}{i}.md" for f in ("docs", "src") for i in range(3)}
    assert stored() == everything
    for _ in range(2):  # a second try finds no copies the first one put under wrong names
        wrong = ingest(tmp_path / "docs", ".", "--prune")
        assert wrong.returncode == 1, wrong.stderr
        assert "0 created" in wrong.stderr and "0 deleted" in wrong.stderr, wrong.stderr
        assert "nothing was put or deleted: --prune would delete 6" in wrong.stderr
        assert "is this the folder they were ingested from" in wrong.stderr
        assert stored() == everything  # nothing erased, nothing added
    # From the right folder, an ordinary prune deletes what is gone.
    (tmp_path / "src" / "src2.md").unlink()
    right = ingest(tmp_path, "docs", "src", "--prune")
    assert right.returncode == 0 and "1 deleted" in right.stderr, right.stderr
    assert "src/src2.md" not in stored()
    # And --force-prune does what it is told.
    forced = ingest(tmp_path / "docs", ".", "--prune", "--force-prune")
    assert forced.returncode == 0, forced.stderr
    assert stored() == {f"docs{i}.md" for i in range(3)}


def test_a_prune_keeps_the_gone_files_documents_when_a_put_failed(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """A file renamed while the tenant is at its document quota: the put of the new name is
    refused, and the prune used to erase the old name's document anyway, whose tombstone
    then refused the file for good. Now nothing is deleted while a file failed, the report
    says so, and once the quota allows, the same run renames it (control)."""
    tenant = unique("ingq")
    key = brain_server.mint_key(tenant, "dev", permissions=KB, namespaces=("proj",))
    for i in range(3):
        (tmp_path / f"d{i}.md").write_text(f"# Doc {i}\n\ntext {i}\n")
    with BrainClient(brain_server.target, key, scope=Scope(namespace="proj")) as client:
        assert len(ingest(client, [tmp_path], "q", cwd=tmp_path).created) == 3
        brain_server.admin("tenants", "set-quota", tenant, "--documents", "3")
        (tmp_path / "d2.md").rename(tmp_path / "d3.md")
        held = ingest(client, [tmp_path], "q", cwd=tmp_path, prune=True)
        assert [f.split(":")[0] for f in held.failed] == ["d3.md"], held.failed
        assert "RESOURCE_EXHAUSTED" in held.failed[0] and held.deleted == []
        assert held.kept_for_failures == 1
        assert "not pruned: 1 document(s) whose files are gone were kept" in held.summary()
        paths = {d.path for d in client.list_documents(collection="q")}
        assert paths == {"d0.md", "d1.md", "d2.md"}
        # The same with line endings changed on the way (an editor, a checkout): the server
        # reads the content as one for its tombstones, so the old document is kept too.
        crlf = (tmp_path / "d1.md").read_text().replace("\n", "\r\n")
        (tmp_path / "d1.md").unlink()
        (tmp_path / "d4.md").write_bytes(crlf.encode())
        held = ingest(client, [tmp_path], "q", cwd=tmp_path, prune=True)
        assert held.deleted == [] and held.kept_for_failures == 2, held.summary()
        (tmp_path / "d4.md").rename(tmp_path / "d1.md")
        brain_server.admin("tenants", "set-quota", tenant, "--documents", "4")
        done = ingest(client, [tmp_path], "q", cwd=tmp_path, prune=True)
        assert (done.created, done.deleted, done.failed) == (["d3.md"], ["d2.md"], [])
        assert "not pruned" not in done.summary()
        assert {d.path for d in client.list_documents(collection="q")} == {
            "d0.md", "d1.md", "d3.md",
        }  # fmt: skip


def test_a_file_that_fails_for_its_own_content_holds_back_no_other_deletion(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """A file the server refuses for its own sake (too many headings: INVALID_ARGUMENT,
    every run) held back every deletion of every later run (an outside review's finding).
    Only a document holding a failed file's content is kept now (the rename the test
    above keeps); an unrelated gone file's document is pruned, and the failure is still
    reported with exit status 1."""
    key = brain_server.mint_key(unique("ingp"), "dev", permissions=KB, namespaces=("proj",))
    (tmp_path / "old.md").write_text("# Old\n\nto be removed\n")
    (tmp_path / "keep.md").write_text("# Keep\n\nstays\n")
    with BrainClient(brain_server.target, key, scope=Scope(namespace="proj")) as client:
        assert len(ingest(client, [tmp_path], "p", cwd=tmp_path).created) == 2
        (tmp_path / "generated.md").write_text("".join(f"# h{i}\n" for i in range(2_001)))
        (tmp_path / "old.md").unlink()
        report = ingest(client, [tmp_path], "p", cwd=tmp_path, prune=True)
        assert [f.split(":")[0] for f in report.failed] == ["generated.md"], report.failed
        assert "INVALID_ARGUMENT" in report.failed[0]
        assert report.deleted == ["old.md"] and report.kept_for_failures == 0
        assert {d.path for d in client.list_documents(collection="p")} == {"keep.md"}


def test_an_empty_label_in_labels_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    """`--labels ""` meant the default without a word, and `--labels a,,b` dropped the
    empty one; both are refused now, naming the flag, before the server is asked."""
    (tmp_path / "a.md").write_text("# A\n")
    env = {**os.environ, "BRAIN_TARGET": "127.0.0.1:9", "BRAIN_API_KEY": "brk_" + "k" * 40}
    for given in ("", "team,,ops"):
        done = subprocess.run(
            [sys.executable, "-m", "brain.clients.ingest", "ingest", ".", "--collection", "c",
             "--labels", given],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode != 0 and "--labels" in done.stderr, done.stderr
        assert "empty label" in done.stderr, done.stderr


def test_the_summary_says_how_many_documents_await_their_vectors(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """A put commits its chunks, searchable by their words, and the server embeds them in
    the background; the summary said nothing of it (an outside review waited 2.5 hours for
    a tree's vectors without a word). With the fillers held, both documents put await
    their vectors, and the summary says so; a run that puts nothing does not ask."""
    key = brain_server.mint_key(unique("ingv"), "dev", permissions=KB, namespaces=("proj",))
    for i in range(2):
        (tmp_path / f"v{i}.md").write_text(f"# Vectors {i}\n\nlater {i}\n")
    scope = Scope(namespace="proj")
    with BrainClient(brain_server.target, key, scope=scope) as client, fillers_held():
        report = ingest(client, [tmp_path], "v", cwd=tmp_path)
        again = ingest(client, [tmp_path], "v", cwd=tmp_path)
    assert len(report.created) == 2 and report.awaiting_vectors == 2
    assert "vectors: 2 document(s) have chunks awaiting their vectors" in report.summary()
    assert len(again.unchanged) == 2 and again.awaiting_vectors is None
    assert "vectors:" not in again.summary()


def test_a_path_two_documents_share_is_named_and_pruned_whole(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """Keys with disjoint labels each put a document at one path of one bucket; a key
    holding both labels sees both. Its ingest names the shared path (a put updates the
    oldest only), and its prune erases every document at a gone path in one run (it took
    one per run). The other paths are not named (control)."""
    tenant = unique("ingl")
    hr = brain_server.mint_key(tenant, "hr", permissions=KB, namespaces=("proj",), labels=("hr",))
    team = brain_server.mint_key(tenant, "team", permissions=KB, namespaces=("proj",))
    both = brain_server.mint_key(
        tenant, "both", permissions=KB, namespaces=("proj",), labels=("team", "hr")
    )
    scope = Scope(namespace="proj")
    (tmp_path / "policy.md").write_text("# Policy\n\nBands are reviewed yearly.\n")
    (tmp_path / "other.md").write_text("# Other\n\nnothing shared\n")
    for key in (hr, team):
        with BrainClient(brain_server.target, key, scope=scope) as client:
            assert ingest(client, [tmp_path / "policy.md"], "lab", cwd=tmp_path).created == [
                "policy.md"
            ]
    with BrainClient(brain_server.target, both, scope=scope) as client:
        listed = [d.path for d in client.list_documents(collection="lab")]
        assert listed == ["policy.md", "policy.md"]
        (tmp_path / "policy.md").write_text("# Policy\n\nBands are reviewed twice a year.\n")
        run = ingest(client, [tmp_path], "lab", cwd=tmp_path)
        assert (run.updated, run.created) == (["policy.md"], ["other.md"])
        assert run.shared_paths == {"policy.md": 2}
        assert "shared path: policy.md: 2 documents of this bucket have it" in run.summary()
        (tmp_path / "policy.md").unlink()
        pruned = ingest(client, [tmp_path], "lab", cwd=tmp_path, prune=True)
        assert pruned.deleted == ["policy.md", "policy.md"] and pruned.shared_paths == {}
        assert [d.path for d in client.list_documents(collection="lab")] == ["other.md"]


def test_labels_of_stored_documents_are_kept_unless_relabel_says_so(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """--labels names the labels of new documents; a stored document that has others keeps
    them, and the report says how many did; --relabel sets them (an unchanged file keeps its
    version), after which the labels' readers see it and the others no longer do."""
    tenant = unique("ingr")
    both = brain_server.mint_key(
        tenant, "both", permissions=KB, namespaces=("proj",), labels=("team", "hr")
    )
    team = brain_server.mint_key(tenant, "team", permissions=KB, namespaces=("proj",))
    scope = Scope(namespace="proj")
    (tmp_path / "bands.md").write_text("# Bands\n\nSalary bands by level.\n")
    with BrainClient(brain_server.target, both, scope=scope) as client:
        first = ingest(client, [tmp_path], "lab", cwd=tmp_path)
        assert first.created == ["bands.md"]
        with BrainClient(brain_server.target, team, scope=scope) as reader:
            assert [d.path for d in reader.list_documents(collection="lab")] == ["bands.md"]
        kept = ingest(client, [tmp_path], "lab", cwd=tmp_path, labels=["hr"])
        assert (kept.unchanged, kept.labels_kept, kept.relabelled) == (["bands.md"], 1, [])
        assert "labels kept: 1 stored document(s) have other labels" in kept.summary()
        moved = ingest(client, [tmp_path], "lab", cwd=tmp_path, labels=["hr"], relabel=True)
        assert (moved.relabelled, moved.unchanged, moved.labels_kept) == (["bands.md"], [], 0)
        assert "1 relabelled" in moved.summary()
        [doc] = list(client.list_documents(collection="lab"))
        assert (list(doc.labels), doc.version) == (["hr"], 1)
        with BrainClient(brain_server.target, team, scope=scope) as reader:
            assert list(reader.list_documents(collection="lab")) == []
        again = ingest(client, [tmp_path], "lab", cwd=tmp_path, labels=["hr"], relabel=True)
        assert (again.unchanged, again.relabelled) == (["bands.md"], [])


def test_the_deadline_of_each_call_is_set_by_timeout(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """--timeout sets each call's deadline (it was 60 s, fixed); a value outside 1..3600
    seconds, or not a number, is refused by name before anything is sent; a sound one
    ingests (control)."""
    (tmp_path / "a.md").write_text("# A\n\nalpha\n")
    key = brain_server.mint_key(unique("ingt"), "dev", permissions=KB, namespaces=("proj",))
    env = {**os.environ, "BRAIN_TARGET": brain_server.target, "BRAIN_API_KEY": key}
    command = [sys.executable, "-m", "brain.clients.ingest", "ingest", ".", "--collection", "t"]

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *extra], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip

    for bad in ("0", "nan", "99999"):
        refused = run("--timeout", bad)
        assert refused.returncode != 0 and "--timeout must be between" in refused.stderr
    with BrainClient(brain_server.target, key, scope=Scope(namespace="proj")) as client:
        assert list(client.list_documents(collection="t")) == []
    done = run("--timeout", "5")
    assert done.returncode == 0 and "1 created" in done.stderr, done.stderr


def test_a_prune_stops_at_a_server_that_is_gone(
    pg_cluster: PgCluster, loop_thread: LoopThread, tmp_path: Path
) -> None:
    """The server lost during a prune: each remaining delete failed on its own, slowly, a
    line each. The first that cannot reach the server ends the prune; the summary counts
    the deletions not tried, and the one done before stays done (control)."""
    server = BrainServer(cluster=pg_cluster, loop=loop_thread, settings=server_settings(pg_cluster))
    server.start()
    stopped = False

    class StoppingAfterOne(BrainClient):
        def delete_document(self, id: str, **kw: Any) -> Any:
            nonlocal stopped
            if stopped:
                return super().delete_document(id, **kw)
            done = super().delete_document(id, **kw)
            server.stop()  # as if killed: every later call finds nobody
            stopped = True
            return done

    try:
        key = server.mint_key(unique("ingd"), "dev", permissions=KB, namespaces=("proj",))
        for i in range(6):
            (tmp_path / f"d{i}.md").write_text(f"# Doc {i}\n\ntext {i}\n")
        scope = Scope(namespace="proj")
        with BrainClient(server.target, key, scope=scope) as client:
            assert len(ingest(client, [tmp_path], "p", cwd=tmp_path).created) == 6
        for i in range(1, 5):
            (tmp_path / f"d{i}.md").unlink()
        with StoppingAfterOne(server.target, key, scope=scope, restart_window=0) as client:
            report = ingest(client, [tmp_path], "p", cwd=tmp_path, prune=True)
        assert report.deleted == ["d1.md"]
        assert len(report.failed) == 1 and "UNAVAILABLE" in report.failed[0], report.failed
        assert report.not_deleted == 2
        assert "not pruned: 2 more document(s)" in report.summary()
    finally:
        if not stopped:
            server.stop()


def test_ingest_stops_sending_at_a_server_that_is_gone(
    pg_cluster: PgCluster, loop_thread: LoopThread, tmp_path: Path
) -> None:
    """The server lost during an ingest: every remaining file failed on its own, slowly, a
    line each (281 lines in an outside review). The first call that cannot reach the
    server ends the sending; the summary counts the files not sent, the batch stored
    before stays stored (control), and nothing is pruned."""
    server = BrainServer(cluster=pg_cluster, loop=loop_thread, settings=server_settings(pg_cluster))
    server.start()
    stopped = False

    class StoppingAfterOne(BrainClient):
        def put_documents(self, *args: Any, **kw: Any) -> Any:
            nonlocal stopped
            if stopped:
                return super().put_documents(*args, **kw)
            done = super().put_documents(*args, **kw)
            server.stop()  # as if killed: every later call finds nobody
            stopped = True
            return done

    try:
        key = server.mint_key(unique("ings"), "dev", permissions=KB, namespaces=("proj",))
        total = 8 * ingest_module.BATCH_FILES
        for i in range(total):
            (tmp_path / f"d{i:03}.md").write_text(f"# Doc {i}\n\ntext {i}\n")
        scope = Scope(namespace="proj")
        with StoppingAfterOne(server.target, key, scope=scope, restart_window=0) as client:
            report = ingest(client, [tmp_path], "p", cwd=tmp_path, prune=True, jobs=1)
        assert len(report.created) == ingest_module.BATCH_FILES  # the first call's
        assert all("UNAVAILABLE" in f for f in report.failed), report.failed
        assert len(report.failed) <= 2 * ingest_module.BATCH_FILES  # the calls in flight
        assert report.not_sent == total - len(report.created) - len(report.failed)
        assert report.not_sent >= 4 * ingest_module.BATCH_FILES
        assert report.deleted == []
        assert f"not sent: {report.not_sent} more file(s)" in report.summary()
        # The calls in flight failed alike: three are shown, the rest counted.
        failed_lines = [line for line in report.summary().splitlines() if "failed:" in line]
        assert len(failed_lines) <= 4 and "the same way" in failed_lines[-1], failed_lines
    finally:
        if not stopped:
            server.stop()
