"""`brain ingest PATH... --collection C [--prune]`: files into the knowledge base.

Runs with the caller's own key (``BRAIN_API_KEY``) and scope (``BRAIN_NAMESPACE``,
``BRAIN_USER_ID``, ``BRAIN_SESSION_ID``, taken from the key when it is confined to one
value), like ``brain-mcp``; no admin access. It

- walks each PATH (a file or a folder), skipping ``.git`` and whatever the ``.gitignore``
  files along the way exclude (read with ``pathspec``, git's own rules), binary files
  and files over 1 MiB;
- names each document by its path relative to the current folder (POSIX slashes); a
  PATH outside the current folder is refused, so no local absolute path is ever stored;
- compares with, and prunes, only the documents of exactly its own bucket (namespace,
  user and session equal to the scope it writes to): a listing also shows the team's and
  other users' documents, which ingest never writes and so never deletes;
- sends only files whose SHA-256 differs from the document already stored at that path
  (compared with ListDocuments, so unchanged files cost no upload);
- gives ``--labels`` to new documents only: a changed file's put keeps the labels its
  document has (someone may have restricted it since);
- with ``--prune``, deletes (erases) the collection's documents under the walked paths
  whose files are gone;
- shows a progress bar on a terminal (tqdm) and ends with one summary line; exit status 1
  when any file failed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pathspec
from tqdm import tqdm

from brain.authz import CommandParser, add_version_argument
from brain.clients import BrainClient
from brain.clients.errors import BrainClientError
from brain.v1 import common_pb2, knowledge_pb2

MAX_FILE_BYTES = 1024 * 1024
ALWAYS_SKIPPED = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "node_modules"})


@dataclass
class Report:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # binary or too large
    failed: list[str] = field(default_factory=list)  # "path: reason"

    def summary(self) -> str:
        line = (
            f"{len(self.created)} created, {len(self.updated)} updated, "
            f"{len(self.unchanged)} unchanged, {len(self.deleted)} deleted, "
            f"{len(self.skipped)} skipped, {len(self.failed)} failed"
        )
        return line + "".join(f"\n  failed: {f}" for f in self.failed)


def walk(roots: Sequence[Path]) -> Iterator[Path]:
    """Every file under ``roots`` that git would not ignore, in a stable order."""
    for root in roots:
        if root.is_file():
            yield root
            continue
        yield from _walk_dir(root, [])


def _walk_dir(folder: Path, specs: list[tuple[Path, pathspec.GitIgnoreSpec]]) -> Iterator[Path]:
    ignore_file = folder / ".gitignore"
    if ignore_file.is_file():
        lines = ignore_file.read_text(errors="replace").splitlines()
        specs = [*specs, (folder, pathspec.GitIgnoreSpec.from_lines(lines))]
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name in ALWAYS_SKIPPED or entry.is_symlink():
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
    absolute = path.resolve()
    try:
        return absolute.relative_to(cwd.resolve()).as_posix()
    except ValueError:
        raise OutsideFolder(
            f"{path} is outside the current folder {cwd}; run brain ingest from a folder "
            "that contains it (documents are named by their path relative to it)"
        ) from None


def same_bucket(doc: knowledge_pb2.Document, scope: common_pb2.Scope) -> bool:
    """Whether a listed document lives in exactly the bucket ``scope`` writes to."""
    return (doc.scope.namespace, doc.scope.user_id, doc.scope.session_id) == (
        scope.namespace,
        scope.user_id,
        scope.session_id,
    )


def read_text(path: Path) -> str | None:
    """The file as text; None when it is binary, not UTF-8 or over the size limit."""
    if path.stat().st_size > MAX_FILE_BYTES:
        return None
    data = path.read_bytes()
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def ingest(
    client: BrainClient,
    roots: Sequence[Path],
    collection: str,
    *,
    prune: bool = False,
    labels: Iterable[str] = (),
    cwd: Path | None = None,
    progress: Callable[[Iterable[Path], int], Iterable[Path]] | None = None,
) -> Report:
    """Bring ``collection`` in line with the files under ``roots``; see the module docstring."""
    cwd = cwd or Path.cwd()
    prefixes = [document_path(r, cwd) for r in roots]  # refuses a root outside cwd first
    report = Report()
    scope = client.scope
    stored = {
        d.path: d
        for d in client.list_documents(collection=collection, page_size=100)
        if same_bucket(d, scope)
    }
    files = list(walk(roots))
    seen: set[str] = set()
    for path in progress(files, len(files)) if progress else files:
        name = document_path(path, cwd)
        seen.add(name)
        try:
            text = read_text(path)
        except OSError as exc:
            report.failed.append(f"{name}: {exc.strerror or exc}")
            continue
        if text is None or not text.strip():
            report.skipped.append(name)
            continue
        digest = hashlib.sha256(text.encode()).hexdigest()
        known = stored.get(name)
        if known is not None and known.content_hash == digest:
            report.unchanged.append(name)
            continue
        try:
            # Labels are for new documents: a re-put without them keeps the document's.
            done = client.put_document(
                collection, name, text, labels=labels if known is None else ()
            )
        except BrainClientError as exc:
            report.failed.append(f"{name}: {exc}")
            continue
        outcome = {
            knowledge_pb2.PUT_OUTCOME_CREATED: report.created,
            knowledge_pb2.PUT_OUTCOME_UPDATED: report.updated,
        }.get(done.outcome, report.unchanged)
        outcome.append(name)
    if prune:
        for name, doc in sorted(stored.items()):
            if name in seen or not _under(name, prefixes):
                continue
            try:
                client.delete_document(doc.id)
            except BrainClientError as exc:
                report.failed.append(f"{name}: {exc}")
                continue
            report.deleted.append(name)
    return report


def _under(name: str, prefixes: Sequence[str]) -> bool:
    """Whether a stored document lies under one of the walked paths (only those are pruned)."""
    return any(
        p in ("", ".") or name == p or name.startswith(p.rstrip("/") + "/") for p in prefixes
    )


def _progress(files: Iterable[Path], total: int) -> Iterable[Path]:
    return tqdm(files, total=total, unit="file", disable=not sys.stderr.isatty(), file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="brain",
        description="Shared Brain from the command line, with your own API key "
        "(BRAIN_API_KEY) and scope (BRAIN_NAMESPACE, BRAIN_USER_ID, BRAIN_SESSION_ID).",
    )
    add_version_argument(p)
    p.add_argument("--target", help="host:port of brain-server [BRAIN_TARGET]")
    p.add_argument("--api-key", help="API key [BRAIN_API_KEY]; prefer the variable")
    p.add_argument("--user-id", help="scope user [BRAIN_USER_ID]")
    p.add_argument("--namespace", help="scope namespace [BRAIN_NAMESPACE]")
    p.add_argument("--session-id", help="scope session [BRAIN_SESSION_ID]")
    p.add_argument("--tls-ca", help="PEM root CA file; enables TLS [BRAIN_TLS_CA]")
    sub = p.add_subparsers(dest="command", required=True)
    ing = sub.add_parser("ingest", help="store files as knowledge documents (only changed ones)")
    ing.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    ing.add_argument("--collection", required=True, help="the collection to fill")
    ing.add_argument(
        "--prune", action="store_true", help="delete documents under PATH whose files are gone"
    )
    ing.add_argument("--labels", default="", help="comma-separated labels for new documents")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `brain` console script."""
    from brain.clients.mcp.proxy import ProxyConfig, resolve_scope

    args = _parser().parse_args(argv)
    config = ProxyConfig.from_args(args, os.environ)
    if not config.api_key:
        sys.exit("brain: set BRAIN_API_KEY to an API key (mint one with `brain-admin keys`)")
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        sys.exit(f"brain ingest: no such file or folder: {', '.join(missing)}")
    labels = [x.strip() for x in args.labels.split(",") if x.strip()]
    try:
        with BrainClient(
            config.target, config.api_key, **{**config.client_options(), "scope": None}
        ) as probe:
            config, problems = resolve_scope(config, probe.whoami())
        if problems:
            sys.exit("brain: the configuration does not fit the API key: " + "; ".join(problems))
        with BrainClient(
            config.target, config.api_key, timeout=60, **config.client_options()
        ) as client:
            report = ingest(
                client, args.paths, args.collection, prune=args.prune, labels=labels,
                progress=_progress,
            )  # fmt: skip
    except (BrainClientError, OutsideFolder) as exc:
        sys.exit(f"brain ingest: {exc}")
    except OSError as exc:  # a TLS file (BRAIN_TLS_CA, ...) or a .gitignore that cannot be read
        sys.exit(f"brain ingest: cannot read {exc.filename}: {exc.strerror}")
    print(f"brain ingest: collection {args.collection}: {report.summary()}", file=sys.stderr)
    if report.failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
