"""The local side of `brain ingest`: which files a walk finds (git's ignore rules), what a
file's document is named, and which files are read as text (see `brain.clients.ingest`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import pathspec

MAX_FILE_BYTES = 1024 * 1024
ALWAYS_SKIPPED = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "node_modules"})


def walk(roots: Sequence[Path]) -> Iterator[Path]:
    """Every file under ``roots`` that git would not ignore, in a stable order."""
    for root in roots:
        if root.is_file() or (root.is_symlink() and not root.exists()):
            yield root  # a dangling or looping link named on the command line: skipped, named
            continue
        yield from _walk_dir(root, [])


def _walk_dir(folder: Path, specs: list[tuple[Path, pathspec.GitIgnoreSpec]]) -> Iterator[Path]:
    ignore_file = folder / ".gitignore"
    if ignore_file.is_file():
        lines = ignore_file.read_text(errors="replace").splitlines()
        specs = [*specs, (folder, pathspec.GitIgnoreSpec.from_lines(lines))]
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name in ALWAYS_SKIPPED:
            continue
        if entry.is_symlink():  # never followed; named as skipped (read() says why)
            if not _ignored(entry, False, specs):
                yield entry
            continue
        is_dir = entry.is_dir()
        if _ignored(entry, is_dir, specs):
            continue
        if is_dir:
            yield from _walk_dir(entry, specs)
        elif entry.is_file():
            yield entry


def _ignored(path: Path, is_dir: bool, specs: list[tuple[Path, pathspec.GitIgnoreSpec]]) -> bool:
    for base, spec in specs:
        relative = path.relative_to(base).as_posix() + ("/" if is_dir else "")
        if spec.match_file(relative):
            return True
    return False


class OutsideFolder(ValueError):
    """A PATH outside the folder documents are named relative to."""


def document_path(path: Path, cwd: Path) -> str:
    """The document's name: its path relative to ``cwd`` (POSIX); ``OutsideFolder`` when it
    is not under ``cwd`` (a local absolute path is no name to share with a team)."""
    # A symbolic link keeps its own name (its folder resolved, not the link): a link loop
    # or a dangling link is named, not followed.
    absolute = path.parent.resolve() / path.name if path.is_symlink() else path.resolve()
    try:
        return absolute.relative_to(cwd.resolve()).as_posix()
    except ValueError:
        raise OutsideFolder(
            f"{path} is outside the current folder {cwd}; run brain ingest from a folder "
            "that contains it (documents are named by their path relative to it)"
        ) from None


class Skipped(ValueError):
    """A file ingest does not send; the message says why."""


def read_text(path: Path) -> str:
    """The file as text; ``Skipped`` when it is binary, not UTF-8, empty or over 1 MiB."""
    if path.stat().st_size > MAX_FILE_BYTES:
        raise Skipped("over 1 MiB")
    data = path.read_bytes()
    if b"\x00" in data:
        raise Skipped("binary")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Skipped("not UTF-8") from None
    if not text.strip():
        raise Skipped("empty")
    return text


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def content_digests(text: str) -> set[str]:
    """SHA-256 of the text as stored under any line endings, with or without a byte-order
    mark: the server's tombstones read them as one content, so a renamed file whose
    endings changed is still a document --prune must keep while its put fails."""
    lf = text.removeprefix("\ufeff").replace("\r\n", "\n")
    forms = {text, lf, lf.replace("\n", "\r\n"), "\ufeff" + lf}
    return {hashlib.sha256(form.encode()).hexdigest() for form in forms}
