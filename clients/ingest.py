"""`brain ingest PATH... --collection C [--prune]`: files into the knowledge base.

Runs with the caller's own key (``BRAIN_API_KEY``) and scope (``BRAIN_NAMESPACE``,
``BRAIN_USER_ID``, ``BRAIN_SESSION_ID``, taken from the key when it is confined to one
value), like ``brain-mcp``; no admin access. It

- walks each PATH (a file or a folder), skipping ``.git`` and whatever the ``.gitignore``
  files along the way exclude (read with ``pathspec``, git's own rules); binary files,
  files that are not UTF-8, empty ones, files over 1 MiB and files whose name is not
  UTF-8 or holds control characters are skipped, each named with its reason at the end
  (control characters and undecodable bytes of a name shown as escapes), and so are
  symbolic links found in a folder (never followed) and links named that lead nowhere;
- names each document by its path relative to the current folder (POSIX slashes); a
  PATH outside the current folder is refused, so no local absolute path is ever stored;
- refuses an empty ``--collection`` (an empty filter lists every collection);
- compares with, and prunes, only the documents of exactly its own bucket (namespace,
  user and session equal to the scope it writes to): a listing also shows the team's and
  other users' documents, which ingest never writes and so never deletes;
- sends only files whose SHA-256 differs from the document already stored at that path
  (compared with ListDocuments, so unchanged files cost no upload), up to 16 files (2 MiB)
  per PutDocuments call and ``--jobs`` calls at a time (default 8; the server commits a
  put's chunks without waiting for embeddings, so the database, not the model, sets the
  pace); a call the server refuses whole (one file it finds invalid) is sent again file by
  file, so the report names the file; the key's rate limit (each file counts) is waited
  out, up to 10 minutes a call;
- gives ``--labels`` to new documents only: a changed file's put keeps the labels its
  document has (someone may have restricted it since), and the report says how many
  stored documents kept other labels; ``--relabel`` sets ``--labels`` on those too (their
  content is sent again, and an unchanged one keeps its version);
- names a path at which the bucket holds several documents (keys with disjoint labels
  each put one there): a put updates the oldest, the others keep their text;
- with ``--prune``, deletes (erases) the collection's documents under the walked paths
  whose files are gone, every one at such a path (each deletion leaves a tombstone, as
  every delete does), unless
  - it would delete more documents than the run found (at least 10), or found none of
    them: that is ingest run from another folder than the one the documents were named
    from, and it puts and deletes nothing and says so (exit status 1) unless
    ``--force-prune``;
  - a file with its content failed to store: a renamed file refused by a full quota
    would lose its old document, and that document's tombstone would then refuse the
    file; that document is kept, and the report says so (a file that failed for its own
    sake, its content too large, say, holds back no other deletion; a file that could not
    be read, whose content is unknown, holds back every one);
- fails a file whose content a deleted document of the collection had (the server keeps it
  out unnoticed) unless ``--readmit-tombstoned`` says to put such content back;
- shows progress in bytes and files on a terminal (tqdm) and ends with one summary line;
  exit status 1 when any file failed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import suppress
from pathlib import Path
from typing import Protocol, TypeVar

import grpc
from tqdm import tqdm

from brain.authz import CommandParser, add_version_argument
from brain.clients import BrainClient
from brain.clients._base import check_api_key
from brain.clients._report import Report, shown
from brain.clients._tree import (
    OutsideFolder,
    Skipped,
    content_digests,
    document_path,
    read_text,
    size_of,
    walk,
)
from brain.clients.errors import BrainClientError, RateLimited, Unavailable
from brain.v1 import common_pb2, knowledge_pb2

DEFAULT_JOBS = 8  # PutDocuments calls in flight at once
DEFAULT_TIMEOUT = 60.0  # seconds: each call's deadline (--timeout)
# Files per PutDocuments call, and their bytes: one round trip for many small files, well
# inside the server's default message size (4 MiB) with a file of the largest size (1 MiB).
BATCH_FILES = 16
BATCH_BYTES = 2 * 1024 * 1024
RATE_LIMIT_WAIT = 600.0  # seconds one call may wait for the key's rate limit in all
# A PutDocuments refused whole with these is one file's fault (its path, its labels): its
# files are sent again one by one, so the report names that file. Any other failure
# (authentication, the server unreachable after retries) fails the call's files alike.
ONE_FILES_FAULT = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED})
T = TypeVar("T")


class Progress(Protocol):
    """Told of each file as it is done, with its size in bytes."""

    def advance(self, nbytes: int) -> None: ...


def same_bucket(doc: knowledge_pb2.Document, scope: common_pb2.Scope) -> bool:
    """Whether a listed document lives in exactly the bucket ``scope`` writes to."""
    return (doc.scope.namespace, doc.scope.user_id, doc.scope.session_id) == (
        scope.namespace,
        scope.user_id,
        scope.session_id,
    )


def ingest(
    client: BrainClient,
    roots: Sequence[Path],
    collection: str,
    *,
    prune: bool = False,
    force_prune: bool = False,
    labels: Iterable[str] = (),
    relabel: bool = False,
    cwd: Path | None = None,
    jobs: int = DEFAULT_JOBS,
    progress: Callable[[int, int], Progress] | None = None,
    readmit_tombstoned: bool = False,
) -> Report:
    """Bring ``collection`` in line with the files under ``roots``; see the module docstring.
    ``progress`` is called with the number of files and their bytes, once, before any."""
    if not collection:  # listing an empty collection lists every one: --prune would erase
        raise ValueError("collection must name a collection; it is empty")
    cwd = cwd or Path.cwd()
    prefixes = [document_path(r, cwd) for r in roots]  # refuses a root outside cwd first
    report = Report()
    scope = client.scope
    # Path -> the bucket's documents there, oldest first (the one a put updates); several
    # when keys with disjoint labels each put one at the path.
    at_path: dict[str, list[knowledge_pb2.Document]] = {}
    for d in client.list_documents(collection=collection, page_size=100):
        if same_bucket(d, scope) and d.collection == collection:
            at_path.setdefault(d.path, []).append(d)
    for docs in at_path.values():
        docs.sort(key=lambda d: d.id)  # ids are UUIDv7: by time, as the server picks
    stored = {path: docs[0] for path, docs in at_path.items()}
    named = set(roots)
    files = [(path, document_path(path, cwd), size_of(path)) for path in walk(roots)]
    seen = {name for _, name, _ in files}
    doomed = [n for n in sorted(stored) if n not in seen and _under(n, prefixes)] if prune else []
    matched = sum(1 for n in stored if n in seen)
    report.shared_paths = {n: len(at_path[n]) for n in seen if len(at_path.get(n, ())) > 1}
    if doomed and not force_prune and (not matched or len(doomed) > max(10, matched)):
        # Documents are named relative to the current folder: run from another folder than
        # the one ingested from, every stored document looks gone (and every file new).
        # Erasing them would also tombstone their content, so ingesting them back from the
        # right folder would be refused; putting the files would add copies under the
        # wrong names. Decided before anything is sent: nothing is put or deleted.
        report.prune_held = (len(doomed), matched, list(prefixes))
        return report
    shown = progress(len(files), sum(size for *_, size in files)) if progress else None
    labels = tuple(labels)

    def read(path: Path, name: str) -> tuple[str, str] | str:
        """A file to send as (outcome "send", its text), or (outcome, detail) of one that is
        not sent: skipped, failed to read, or unchanged (its hash is the stored one's)."""
        if not name.isprintable():
            return "skipped", "its name is not UTF-8 or holds control characters"
        if path.is_symlink() and (path not in named or not path.exists()):
            # A link found in a folder is never followed; one named on the command line is
            # read, unless it leads nowhere.
            return "skipped", "a symbolic link, not followed"
        try:
            text = read_text(path)
        except Skipped as why:
            return "skipped", str(why)
        except OSError as exc:
            return "failed", exc.strerror or str(exc)
        known = stored.get(name)
        digest = hashlib.sha256(text.encode()).hexdigest()
        if known is not None and known.content_hash == digest and not relabeling(known):
            return "unchanged", ""
        return text

    def relabeling(doc: knowledge_pb2.Document) -> bool:
        """Whether this run sets --labels on a stored document that has others."""
        return relabel and bool(labels) and set(doc.labels) != set(labels)

    def labels_of(name: str) -> tuple[str, ...]:
        # Labels are for new documents: a re-put without them keeps the document's, unless
        # --relabel.
        known = stored.get(name)
        return labels if known is None or relabeling(known) else ()

    def item(name: str, text: str) -> knowledge_pb2.PutDocumentsItem:
        return knowledge_pb2.PutDocumentsItem(
            path=name, content=text, labels=labels_of(name), readmit_tombstoned=readmit_tombstoned
        )

    def put(name: str, text: str) -> tuple[str, str, int]:
        """One file alone (PutDocument): a batch the server refused as a whole, or a server
        from before PutDocuments."""
        try:
            done = patiently(
                lambda: client.put_document(
                    collection, name, text, labels=labels_of(name),
                    readmit_tombstoned=readmit_tombstoned,
                )
            )  # fmt: skip
        except BrainClientError as exc:
            return "failed", str(exc), 0
        return outcome(done, name), "", len(text.encode())

    def outcome(done: knowledge_pb2.PutDocumentResponse, name: str) -> str:
        """The report's list for a put: an unchanged file sent for its labels alone is
        "relabelled"."""
        said = _outcome(done)
        known = stored.get(name)
        return "relabelled" if said == "unchanged" and known and relabeling(known) else said

    old_server: list[bool] = []  # set once the server answers PutDocuments UNIMPLEMENTED
    # What --prune must not lose: the contents of files that failed to store (a rename's
    # new put refused), and files that failed before their content was known.
    failed_digests: set[str] = set()
    failed_unread: list[str] = []
    server_gone: list[bool] = []  # set once a call found the server unreachable

    def batch(group: list[tuple[Path, str]]) -> list[tuple[str, str, int]]:
        """(outcome, detail, bytes sent) of each file of ``group``, read, hashed and put in
        one PutDocuments call on a pool thread."""
        results: list[tuple[str, str, int] | None] = [None] * len(group)
        sending: list[tuple[int, str, str]] = []
        for i, (path, name) in enumerate(group):
            read_as = read(path, name)
            if isinstance(read_as, str):
                sending.append((i, name, read_as))
            else:
                results[i] = (*read_as, 0)
                if read_as[0] == "failed":
                    failed_unread.append(name)
        answers = None
        whole: BrainClientError | None = None  # the call failed for every file alike
        if sending and not old_server:
            try:
                items = [item(name, text) for _, name, text in sending]
                answers = patiently(lambda: client.put_documents(collection, items))
            except BrainClientError as exc:
                if exc.code == grpc.StatusCode.UNIMPLEMENTED:  # a server before PutDocuments
                    old_server.append(True)
                elif exc.code not in ONE_FILES_FAULT:
                    whole = exc
                    if isinstance(exc, Unavailable):  # the rest would fail alike, slowly
                        server_gone.append(True)
        for n, (i, name, text) in enumerate(sending):
            if whole is not None:
                results[i] = ("failed", str(whole), 0)
            elif answers is None:  # refused whole for one file, or an older server
                results[i] = put(name, text)
            elif answers[n].error_code:
                failed = f"{answers[n].error_code}: {answers[n].error_message}"
                results[i] = ("failed", failed, 0)
            else:
                results[i] = (outcome(answers[n].put, name), "", len(text.encode()))
        for i, _, text in sending:
            if results[i] is not None and results[i][0] == "failed":  # type: ignore[index]
                failed_digests.update(content_digests(text))
        return [r for r in results if r is not None]

    def record(outcome: str, detail: str, sent: int, name: str, size: int) -> None:
        getattr(report, outcome).append(f"{name}: {detail}" if outcome == "failed" else name)
        if outcome == "skipped":
            report.why_skipped[name] = detail
        report.sent_bytes += sent
        if shown is not None:
            shown.advance(size)

    def finish(future: Future[list[tuple[str, str, int]]], group: list[tuple[str, int]]) -> None:
        for (outcome, detail, sent), (name, size) in zip(future.result(), group, strict=True):
            record(outcome, detail, sent, name, size)

    # A bounded window of batches in flight: files are read on the threads, never all at once.
    with ThreadPoolExecutor(max(1, jobs), thread_name_prefix="ingest") as pool:
        running: dict[Future[list[tuple[str, str, int]]], list[tuple[str, int]]] = {}
        for group in batches(files):
            if len(running) >= 2 * max(1, jobs) and not server_gone:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for f in finished:
                    finish(f, running.pop(f))
            if server_gone:
                report.not_sent += len(group)
                if shown is not None:
                    shown.advance(sum(size for *_, size in group))
                continue
            future = pool.submit(batch, [(path, name) for path, name, _ in group])
            running[future] = [(name, size) for _, name, size in group]
        for f in list(running):
            finish(f, running.pop(f))
    if labels and not relabel:
        report.labels_kept = sum(
            1 for n in seen if n in stored and set(stored[n].labels) != set(labels)
        )
    if doomed and (failed_unread or failed_digests or report.not_sent):
        kept = [
            n for n in doomed
            if failed_unread or report.not_sent
            or any(d.content_hash in failed_digests for d in at_path[n])
        ]  # fmt: skip
        report.kept_for_failures = sum(len(at_path[n]) for n in kept)
        doomed = [n for n in doomed if n not in kept]
    gone = [(name, doc) for name in doomed for doc in at_path[name]]
    for n, (name, doc) in enumerate(gone):
        try:
            client.delete_document(doc.id)
        except Unavailable as exc:  # the server is gone: the rest would fail alike, slowly
            report.failed.append(f"{name}: {exc}")
            report.not_deleted = len(gone) - n - 1
            break
        except BrainClientError as exc:
            report.failed.append(f"{name}: {exc}")
            continue
        report.deleted.append(name)
    if (report.created or report.updated) and not report.not_sent:
        # Puts commit chunks searchable by their words; the server embeds them later.
        with suppress(BrainClientError):  # a figure for the summary only
            report.awaiting_vectors = sum(
                1 for d in client.list_documents(collection=collection, page_size=100)
                if same_bucket(d, scope) and d.path in seen and not d.fully_embedded
            )  # fmt: skip
    report.sort()
    return report


def patiently(call: Callable[[], T]) -> T:
    """``call()``, waiting out the key's rate limit (each file counts as a call) as often as
    it says, up to RATE_LIMIT_WAIT seconds in all; then its RateLimited is raised."""
    waited = 0.0
    while True:
        try:
            return call()
        except RateLimited as exc:
            if exc.retry_after is None:  # a quota or a full disk: waiting will not help
                raise
            pause = min(max(exc.retry_after, 0.05), 10.0)
            if waited + pause > RATE_LIMIT_WAIT:
                raise
            time.sleep(pause)
            waited += pause


def batches(files: Sequence[tuple[Path, str, int]]) -> Iterator[list[tuple[Path, str, int]]]:
    """Consecutive files in groups of at most BATCH_FILES and BATCH_BYTES (by size on disk;
    a larger file goes alone), one PutDocuments call each."""
    group: list[tuple[Path, str, int]] = []
    nbytes = 0
    for one in files:
        if group and (len(group) >= BATCH_FILES or nbytes + one[2] > BATCH_BYTES):
            yield group
            group, nbytes = [], 0
        group.append(one)
        nbytes += one[2]
    if group:
        yield group


def _outcome(done: knowledge_pb2.PutDocumentResponse) -> str:
    return {
        knowledge_pb2.PUT_OUTCOME_CREATED: "created",
        knowledge_pb2.PUT_OUTCOME_UPDATED: "updated",
    }.get(done.outcome, "unchanged")


def _under(name: str, prefixes: Sequence[str]) -> bool:
    """Whether a stored document lies under one of the walked paths (only those are pruned)."""
    return any(
        p in ("", ".") or name == p or name.startswith(p.rstrip("/") + "/") for p in prefixes
    )


class _Bar:
    """A tqdm bar in bytes (with their rate) that also counts files; on a terminal only."""

    def __init__(self, files: int, nbytes: int) -> None:
        self.files, self.done = files, 0
        self.bar = tqdm(
            total=nbytes, unit="B", unit_scale=True, unit_divisor=1024,
            disable=not sys.stderr.isatty(), file=sys.stderr,
        )  # fmt: skip
        self.bar.set_postfix_str(f"0/{files} files", refresh=False)

    def advance(self, nbytes: int) -> None:
        self.done += 1
        self.bar.set_postfix_str(f"{self.done}/{self.files} files", refresh=False)
        self.bar.update(nbytes)
        if self.done == self.files:
            self.bar.close()


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
    p.add_argument(
        "--tls-cert", help="PEM client certificate, for a server that asks for one (mTLS) "
        "[BRAIN_TLS_CERT]",
    )  # fmt: skip
    p.add_argument("--tls-key", help="its PEM private key [BRAIN_TLS_KEY]")
    sub = p.add_subparsers(dest="command", required=True)
    ing = sub.add_parser("ingest", help="store files as knowledge documents (only changed ones)")
    ing.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    ing.add_argument("--collection", required=True, help="the collection to fill")
    ing.add_argument(
        "--prune", action="store_true", help="delete documents under PATH whose files are gone"
    )
    ing.add_argument(
        "--force-prune", action="store_true",
        help="with --prune, delete even when it would delete more documents than this run "
        "found (or it found none of them): by default that looks like the wrong folder",
    )  # fmt: skip
    ing.add_argument("--labels", help="comma-separated labels for new documents")
    ing.add_argument(
        "--relabel", action="store_true",
        help="with --labels, set them on the stored documents of the files walked too "
        "(a key removes only labels it holds)",
    )  # fmt: skip
    ing.add_argument(
        "--readmit-tombstoned", action="store_true",
        help="put back files whose content a deleted document of the collection had",
    )  # fmt: skip
    ing.add_argument(
        "--jobs", type=int, default=DEFAULT_JOBS,
        help=f"puts in flight at once (default {DEFAULT_JOBS})",
    )  # fmt: skip
    ing.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
        help=f"deadline of each call, retries included (default {DEFAULT_TIMEOUT:g}); a "
        "slow server or a large batch of files may need more",
    )  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `brain` console script."""
    from brain.clients.mcp.config import ProxyConfig, resolve_scope

    args = _parser().parse_args(argv)
    config = ProxyConfig.from_args(args, os.environ)
    if not config.api_key:
        sys.exit("brain: set BRAIN_API_KEY to an API key (mint one with `brain-admin keys`)")
    try:
        check_api_key(config.api_key)
    except ValueError as exc:
        sys.exit(f"brain: BRAIN_API_KEY is not a usable key: {exc}")
    missing = [str(p) for p in args.paths if not p.exists() and not p.is_symlink()]
    if missing:
        sys.exit(f"brain ingest: no such file or folder: {', '.join(missing)}")
    if not args.collection:
        sys.exit("brain ingest: --collection must name a collection; it is empty")
    labels = [x.strip() for x in (args.labels or "").split(",") if x.strip()]
    if args.labels is not None and len(labels) != len(args.labels.split(",")):
        sys.exit(
            f"brain ingest: --labels {args.labels!r} has an empty label; name each label, "
            "or leave --labels out for the default"
        )
    if args.relabel and not labels:
        sys.exit("brain ingest: --relabel sets the labels of --labels; name them")
    if not 1 <= args.jobs <= 64:
        sys.exit("brain ingest: --jobs must be between 1 and 64")
    if not 1 <= args.timeout <= 3600:  # (NaN fails both)
        sys.exit("brain ingest: --timeout must be between 1 and 3600 seconds")
    try:
        with BrainClient(
            config.target, config.api_key, **{**config.client_options(), "scope": None}
        ) as probe:
            config, problems = resolve_scope(config, probe.whoami())
        if problems:
            sys.exit("brain: the configuration does not fit the API key: " + "; ".join(problems))
        with BrainClient(
            config.target, config.api_key, timeout=args.timeout, **config.client_options()
        ) as client:
            report = ingest(
                client, args.paths, args.collection, prune=args.prune,
                force_prune=args.force_prune, labels=labels, relabel=args.relabel,
                jobs=args.jobs, progress=_Bar, readmit_tombstoned=args.readmit_tombstoned,
            )  # fmt: skip
    except (BrainClientError, OutsideFolder) as exc:
        sys.exit(f"brain ingest: {exc}")
    except OSError as exc:  # a TLS file (BRAIN_TLS_CA, ...) or a .gitignore that cannot be read
        sys.exit(f"brain ingest: cannot read {exc.filename}: {exc.strerror}")
    print(f"brain ingest: collection {shown(args.collection)}: {report.summary()}", file=sys.stderr)
    if report.failed or report.not_sent or report.prune_held is not None:
        sys.exit(1)


if __name__ == "__main__":
    main()
