"""The knowledge domain: validation and the transaction behind each KnowledgeService RPC.

Documents share the memories' machinery (caller transactions, the visibility predicate,
labels, page tokens, the embedder and the retrieval lanes) through ``Memories``, and the
same rules: everything is validated before a transaction opens, a document outside the
key's scope answers NOT_FOUND byte-identical to an id that never existed, and write
power follows write scope.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import asyncpg
import structlog

from brain.authz import Caller, Permission
from brain.server.domain import convert, cursors, quotas
from brain.server.domain import validation as check
from brain.server.domain.knowledge import chunking, measures
from brain.server.domain.knowledge.search import ChunkSearch, Found
from brain.server.domain.memories import DEFAULT_PAGE_SIZE, Memories, placement
from brain.server.domain.retrieval.embedders import EmbedderError
from brain.server.errors import (
    BrainError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    StorageFull,
)
from brain.server.storage import document_tombstones as tombstones
from brain.server.storage import knowledge as sql
from brain.server.storage.visibility import Visibility
from brain.v1 import common_pb2, knowledge_pb2

MAX_DOCUMENT_BYTES = 1024 * 1024
MAX_PATH_CHARS = 512
MAX_PUT_DOCUMENTS = 100  # documents of one PutDocuments call
# What refuses one document of PutDocuments for what is stored (a tombstone, a quota, a
# review-required namespace, labels it cannot remove): its result says so, the others go on.
REFUSALS = (FailedPrecondition, PermissionDenied, ResourceExhausted, InvalidArgument, NotFound)
# Threads that chunk documents beside the event loop, shared by the process: a put never
# blocks other calls, and at most this many documents are cut at once, whatever a client
# cancels (a cancelled call's queued chunking never starts).
CHUNKING_THREADS = 2
_chunkers = ThreadPoolExecutor(CHUNKING_THREADS, thread_name_prefix="chunking")
DOCUMENT_NOT_FOUND = "document not found"

FORMAT_FROM_PROTO = {
    knowledge_pb2.DOCUMENT_FORMAT_MARKDOWN: "markdown",
    knowledge_pb2.DOCUMENT_FORMAT_PYTHON: "python",
    knowledge_pb2.DOCUMENT_FORMAT_CODE: "code",
    knowledge_pb2.DOCUMENT_FORMAT_TEXT: "text",
}
FORMAT_TO_PROTO = {v: k for k, v in FORMAT_FROM_PROTO.items()}
STATUS_TO_PROTO = {
    "active": knowledge_pb2.DOCUMENT_STATUS_ACTIVE,
    "deleted": knowledge_pb2.DOCUMENT_STATUS_DELETED,
}

_log = structlog.get_logger("brain.knowledge")


def content_fingerprint(pepper: bytes, content: str) -> bytes:
    """Keyed hash of a document's content, for tombstones: never the text or a plain hash.
    Exact but for line endings and a byte-order mark: a deleted file's content stays out,
    and a file that differs from it (in case, or in whitespace, which Python and YAML read)
    is another file."""
    text = content.removeprefix("\ufeff").replace("\r\n", "\n")
    return hmac.new(pepper, b"document-exact:" + text.encode(), hashlib.sha256).digest()


def folded_fingerprint(pepper: bytes, content: str) -> bytes:
    """The fingerprint of tombstones left before `content_fingerprint` was exact: the
    content NFKC-normalised, case-folded and whitespace-collapsed, as memory fingerprints.
    A put is still checked against those, so no tombstone lapsed; none is made any more
    (it refused files that differed in case or indentation only)."""
    # ASCII is its own NFKC form and lower() is its case fold: skip the slow path.
    folded = content.lower() if content.isascii() else check.normalise(content)
    normalised = " ".join(folded.split()) if content.isascii() else folded
    return hmac.new(pepper, b"document:" + normalised.encode(), hashlib.sha256).digest()


def _prepare(
    content: str, fmt: str, measure: measures.Measure, pepper: bytes
) -> tuple[list[chunking.Chunk], bytes]:
    """A put's CPU work, on a chunking thread: the chunks and the content's fingerprint."""
    return chunking.chunk(content, fmt, measure=measure), content_fingerprint(pepper, content)


def document_not_found() -> NotFound:
    """The one NOT_FOUND for a document id: byte-identical for missing and out-of-scope ids."""
    return NotFound(DOCUMENT_NOT_FOUND)


class Poke(Protocol):
    """The background filler as a put sees it (``filler.ChunkFiller``)."""

    def poke(self) -> None: ...


def receipt(row: asyncpg.Record) -> knowledge_pb2.Document:
    """What a key without knowledge:read learns from its own put: the version it wrote,
    never who created the document or its labels (as memories answer such keys)."""
    d = document_message(row)
    d.created_by = ""
    del d.labels[:]
    return d


def document_message(row: asyncpg.Record, with_content: bool = False) -> knowledge_pb2.Document:
    d = knowledge_pb2.Document(
        id=str(row["document_id"]),
        version=row["version"],
        scope=common_pb2.Scope(
            user_id=row["user_id"], namespace=row["namespace"], session_id=row["session_id"]
        ),
        collection=row["collection"],
        path=row["path"],
        format=FORMAT_TO_PROTO[row["format"]],
        labels=row["labels"],
        status=STATUS_TO_PROTO[row["status"]],
        content_hash=bytes(row["content_hash"]).hex() if row["content_hash"] else "",
        size_bytes=row["size_bytes"],
        chunk_count=row["chunk_count"],
        content=row["content"] if with_content else "",
        created_by=row["created_by"],
        changed_by=row["changed_by"],
        change=row["change"],
        fully_embedded=row["fully_embedded"],
    )
    for name in ("recorded_at", "retired_at"):
        stamp = convert.ts(row[name])
        if stamp is not None:
            getattr(d, name).CopyFrom(stamp)
    return d


def document_path(field: str, value: str) -> str:
    """A document's path in its collection: a relative path with ``/`` between its
    folders (as `brain ingest` names files), of printable characters, at most 512 of them.

    Two spellings of one file (``x.md``, ``./x.md``, ``a//x.md``) would be two documents,
    and a name with an escape sequence or a line separator recolours or splits every
    listing that prints it, so neither is a path."""
    check.text(field, value, limit=MAX_PATH_CHARS)
    if not value.strip():
        raise InvalidArgument(field, "is required")
    if any(ch in value for ch in "\n\r\t"):
        raise InvalidArgument(field, "must be one line")
    if not value.isprintable():
        raise InvalidArgument(
            field, "must be printable (no control, format or line-separator characters)"
        )
    if "\\" in value:
        raise InvalidArgument(field, "must use / between folders, not \\")
    if value.startswith("/"):
        raise InvalidArgument(field, "must be relative (no leading /)")
    if any(part in ("", ".", "..") for part in value.split("/")):
        raise InvalidArgument(field, "must not hold empty, . or .. parts (a//b, ./a, a/../b, a/)")
    return value


def document_content(field: str, value: str) -> str:
    if "\x00" in value:
        raise InvalidArgument(field, "must not contain NUL bytes")
    if not check.visible(value):  # empty, blank, or zero-width characters only
        raise InvalidArgument(field, "must not be empty")
    size = len(value.encode())
    if size > MAX_DOCUMENT_BYTES:
        raise InvalidArgument(
            field, f"is {size} bytes; the limit is {MAX_DOCUMENT_BYTES} bytes (1 MiB)"
        )
    return value


def document_id(field: str, value: str) -> uuid.UUID:
    if not value:
        raise InvalidArgument(field, "is required")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidArgument(field, "is not a document id (a UUID)") from None


@dataclass(frozen=True, slots=True)
class _Put:
    """One document's put, its arguments checked (`Knowledge.validated`)."""

    req: knowledge_pb2.PutDocumentRequest
    namespace: str
    collection: str
    path: str
    content: str
    fmt: str
    requested: list[str]
    item: str  # "" for PutDocument, "documents[i]." for a document of PutDocuments


class Knowledge:
    """Carries out KnowledgeService RPCs for an authenticated caller."""

    def __init__(self, memories: Memories) -> None:
        self.memories = memories
        # BuildContext reads chunks through the searcher (``KnowledgeRecall``).
        self.searching = ChunkSearch(memories)
        memories.knowledge = self.searching
        # Set by the server: embeds the chunks a put stores (none: they stay pending).
        self.filler: Poke | None = None
        # How chunks are sized, by embedder (a tenant may have its own: routing.py).
        self._measures: dict[int, measures.Measure] = {}

    @property
    def measure(self) -> measures.Measure:
        """How the chunks of the request being served are sized: by its tenant's embedder's
        window, in that model's own tokens where the server can count them."""
        embedder = self.memories.embedder
        resolve = getattr(embedder, "resolve", None)  # RoutedEmbedder: the caller's tenant's
        if callable(resolve):
            embedder = resolve()
        found = self._measures.get(id(embedder))
        if found is None:
            found = self._measures[id(embedder)] = measures.measure_for(embedder)
        return found

    async def prepared(self, content: str, fmt: str) -> tuple[list[chunking.Chunk], bytes]:
        """The document's chunks and its content's fingerprint, made on a chunking thread
        (never on the event loop); INVALID_ARGUMENT naming ``content`` when its structure
        exceeds the limits."""
        loop = asyncio.get_running_loop()
        pepper, measure = self.memories.pepper, self.measure
        try:
            return await loop.run_in_executor(_chunkers, _prepare, content, fmt, measure, pepper)
        except chunking.TooComplex as exc:
            raise InvalidArgument("content", str(exc)) from exc
        except EmbedderError as exc:  # the tokenizer cannot load: nor can the model
            _log.warning("cannot count tokens; chunks sized in characters", error=str(exc))
            for key, known in self._measures.items():
                if known is measure:
                    self._measures[key] = measures.Characters()
            return await self.prepared(content, fmt)

    async def checked(
        self,
        conn: asyncpg.Connection,
        caller: Caller,
        where: tuple[str, str, str, str],
        fingerprint: bytes,
        req: knowledge_pb2.PutDocumentRequest,
        current: asyncpg.Record | None,
    ) -> datetime:
        """The checks of a put that will write, then its transaction time. FAILED_PRECONDITION
        when a tombstone that binds the caller holds this content in this collection of the
        bucket (``where``), unless the put says ``readmit_tombstoned``: then the put lifts
        it (a tombstone binds only callers who could see the deleted document; to others the
        content was never there). RESOURCE_EXHAUSTED past the tenant's document quotas."""
        await tombstones.lock_contents(conn, caller.tenant_id, where, [fingerprint])
        vis = self.memories.visibility(caller)
        folded = await asyncio.get_running_loop().run_in_executor(
            _chunkers, folded_fingerprint, self.memories.pepper, req.content
        )
        held = await tombstones.held_back(conn, vis, where, [fingerprint, folded])
        if held.tombstones and not req.readmit_tombstoned:
            raise FailedPrecondition(
                f"content: a document with this content was deleted from collection "
                f"{where[3]} in this bucket (tombstone {held.tombstones[0]}); to put it back, "
                "set readmit_tombstoned on the put (brain ingest --readmit-tombstoned)"
            )
        await quotas.reserve_documents(
            conn,
            vis,
            adding=1 if current is None else 0,
            adding_bytes=len(req.content.encode()) - (current["size_bytes"] if current else 0),
        )
        if held.tombstones:
            await tombstones.readmit(conn, vis, held.tombstones, caller.principal)
        return held.at

    async def refuse_unreviewed(
        self, conn: asyncpg.Connection, caller: Caller, namespace: str
    ) -> None:
        """Documents have no candidates: in a review-required namespace only a reviewer
        publishes them (delete is erasure and stays open, as forget is for memories)."""
        review = self.memories.review
        if review is not None and await review.review_required(conn, caller, namespace):
            raise FailedPrecondition(
                f"scope.namespace: namespace {namespace} is review-required and documents "
                "have no review: only a key with memories:review puts documents there"
            )

    async def put(
        self, caller: Caller, req: knowledge_pb2.PutDocumentRequest, timeout_ms: int | None = None
    ) -> knowledge_pb2.PutDocumentResponse:
        put = self.validated(caller, req)
        return await self.stored(caller, put, await self.chunked(put), timeout_ms)

    async def put_many(
        self, caller: Caller, req: knowledge_pb2.PutDocumentsRequest, timeout_ms: int | None = None
    ) -> list[knowledge_pb2.PutDocumentResponse | BrainError]:
        """PutDocuments: every document checked and chunked before any is stored (an invalid
        one refuses the call, naming it), then each stored as `put` stores one, in its own
        transaction; a document that cannot be stored gets its error, the others go on."""
        if not req.documents:
            raise InvalidArgument("documents", "is required: 1 to 100 documents")
        if len(req.documents) > MAX_PUT_DOCUMENTS:
            raise InvalidArgument(
                "documents",
                f"holds {len(req.documents)} documents; the limit is {MAX_PUT_DOCUMENTS} a call",
            )
        puts: list[_Put] = []
        paths: dict[str, int] = {}
        for i, item in enumerate(req.documents):
            one = knowledge_pb2.PutDocumentRequest(
                scope=req.scope, collection=req.collection, path=item.path, content=item.content,
                format=item.format, labels=item.labels, readmit_tombstoned=item.readmit_tombstoned,
            )  # fmt: skip
            put = self.validated(caller, one, f"documents[{i}].")
            if put.path in paths:
                raise InvalidArgument(
                    f"documents[{i}].path",
                    f"is also documents[{paths[put.path]}].path; each document of a call "
                    "needs a path of its own",
                )
            paths[put.path] = i
            puts.append(put)
        pieces = [await self.chunked(put) for put in puts]
        results: list[knowledge_pb2.PutDocumentResponse | BrainError] = []
        for put, chunks in zip(puts, pieces, strict=True):
            try:
                results.append(await self.stored(caller, put, chunks, timeout_ms))
            except REFUSALS as exc:  # this document's own refusal; the others go on
                if isinstance(exc, StorageFull):
                    raise
                results.append(exc)
            # Anything else (the database unavailable or its disk full, a deadline, a conflict)
            # fails the call: the client retries it, and the documents already stored answer
            # UNCHANGED then.
        return results

    def validated(
        self, caller: Caller, req: knowledge_pb2.PutDocumentRequest, item: str = ""
    ) -> _Put:
        """A put's arguments checked (``item``: the prefix naming a document of
        PutDocuments, e.g. ``documents[3].``); INVALID_ARGUMENT or PERMISSION_DENIED
        naming the field."""
        scope = caller.scope
        namespace = check.name("scope.namespace", scope.namespace, required=True)
        check.name("scope.user_id", scope.user_id)
        check.name("scope.session_id", scope.session_id)
        collection = check.name("collection", req.collection, required=True)
        path = document_path(f"{item}path", req.path)
        content = document_content(f"{item}content", req.content)
        if req.format not in knowledge_pb2.DocumentFormat.values():
            raise InvalidArgument(f"{item}format", f"unknown document format {req.format}")
        fmt = FORMAT_FROM_PROTO.get(req.format) or chunking.detect_format(path)
        requested = check.names(f"{item}labels", req.labels, limit=check.MAX_LABELS)
        held = caller.key.labels
        if set(requested) - held:
            raise PermissionDenied(
                f"{item}labels: this key cannot grant label(s) {sorted(set(requested) - held)}; "
                f"it holds {sorted(held)}"
            )
        return _Put(req, namespace, collection, path, content, fmt, requested, item)

    async def chunked(self, put: _Put) -> tuple[list[sql.NewChunk], bytes]:
        """The put's chunks (stored without vectors: the filler embeds them once the put
        commits) and its content's fingerprint."""
        try:
            pieces, fingerprint = await self.prepared(put.content, put.fmt)
        except InvalidArgument as exc:  # the content's structure: name the document's field
            raise InvalidArgument(f"{put.item}{exc.field}", exc.problem) from exc
        chunks = [
            sql.NewChunk(c.content, list(c.heading_path), c.line_start, c.line_end) for c in pieces
        ]
        return chunks, fingerprint

    async def stored(
        self,
        caller: Caller,
        put: _Put,
        prepared: tuple[list[sql.NewChunk], bytes],
        timeout_ms: int | None = None,
    ) -> knowledge_pb2.PutDocumentResponse:
        """The put's transaction: a new version with its chunks, or nothing when the content
        is unchanged (for a key that may read)."""
        req, namespace, collection, path = put.req, put.namespace, put.collection, put.path
        content, fmt, requested = put.content, put.fmt, put.requested
        chunks, fingerprint = prepared
        scope = caller.scope
        digest = hashlib.sha256(content.encode()).digest()
        vis = self.memories.visibility(caller)
        bucket = (namespace, scope.user_id, scope.session_id, collection, path)
        # A key that may not read gets no content oracle: its put always writes a version.
        reader = caller.has(Permission.KNOWLEDGE_READ.value)
        async with self.memories.tx(caller, timeout_ms=timeout_ms) as conn:
            await self.refuse_unreviewed(conn, caller, namespace)
            await sql.lock_path(conn, caller.tenant_id, *bucket)
            current = await self.locked_at_path(conn, vis, bucket)
            labels = self.labels_for(caller, current, requested)
            relabel = current is not None and set(labels) != set(current["labels"])
            if reader and current is not None and bytes(current["content_hash"] or b"") == digest:
                if relabel:
                    await sql.relabel(conn, current["tenant_id"], current["document_id"], labels)
                    current = await sql.find_at_path(conn, vis, *bucket)
                    assert current is not None
                return knowledge_pb2.PutDocumentResponse(
                    document=document_message(current), outcome=knowledge_pb2.PUT_OUTCOME_UNCHANGED
                )
            at = await self.checked(conn, caller, bucket[:4], fingerprint, req, current)
            if current is None:
                doc_id, version, created_by = cursors.uuid7(), 1, caller.principal
            else:
                doc_id, version = current["document_id"], current["version"] + 1
                created_by = current["created_by"]
                await sql.retire(conn, current["tenant_id"], doc_id, current["version"], at)
                if relabel:
                    await sql.relabel(conn, current["tenant_id"], doc_id, labels)
            new = sql.NewVersion(
                document_id=doc_id, version=version, namespace=namespace,
                user_id=scope.user_id, session_id=scope.session_id, collection=collection,
                path=path, format=fmt, labels=labels, content=content, content_hash=digest,
                created_by=created_by, changed_by=caller.principal,
                changed_by_key=caller.key.key_id, chunks=chunks,
            )  # fmt: skip
            await sql.insert_version(
                conn, caller.tenant_id, new, at,
                one_statement=not self.memories.limits.distributed,
            )  # fmt: skip
            row = await sql.get(conn, vis, doc_id, 0)
        assert row is not None
        if self.filler is not None and chunks:
            self.filler.poke()
        outcome = (
            knowledge_pb2.PUT_OUTCOME_CREATED if version == 1 else knowledge_pb2.PUT_OUTCOME_UPDATED
        )
        shown = document_message(row) if reader else receipt(row)
        return knowledge_pb2.PutDocumentResponse(document=shown, outcome=outcome)

    @staticmethod
    async def locked_at_path(
        conn: asyncpg.Connection, vis: Visibility, bucket: tuple[str, str, str, str, str]
    ) -> asyncpg.Record | None:
        """The document at the path, read again once its writer lock is held: a delete holds
        that lock (not the path's), so a put never builds on a version being erased."""
        current = await sql.find_at_path(conn, vis, *bucket)
        locked: set[uuid.UUID] = set()
        while current is not None and current["document_id"] not in locked:
            await sql.lock_document(conn, current["tenant_id"], current["document_id"])
            locked.add(current["document_id"])
            current = await sql.find_at_path(conn, vis, *bucket)
        return current

    def labels_for(
        self, caller: Caller, current: asyncpg.Record | None, requested: list[str]
    ) -> list[str]:
        """A new document gets the requested labels (default ``team``); a re-put keeps the
        document's labels unless it names others, and then, as an update of a memory,
        removes only labels the key holds."""
        if current is None:
            return placement.granted(caller, requested)
        present = set(current["labels"])
        if not requested:
            return sorted(present)
        if not present - caller.key.labels <= set(requested):
            raise PermissionDenied(
                "labels: this key cannot remove labels it does not hold; keep the "
                "document's other labels, or ask a key that holds them"
            )
        return sorted(requested)

    async def get(
        self, caller: Caller, req: knowledge_pb2.GetDocumentRequest, timeout_ms: int | None = None
    ) -> knowledge_pb2.GetDocumentResponse:
        doc_id = document_id("id", req.id)
        if req.version < 0:
            raise InvalidArgument("version", "must not be negative")
        vis = self.memories.visibility(caller)
        async with self.memories.tx(
            caller, timeout_ms=timeout_ms, readonly=True, replica=True
        ) as conn:
            row = await sql.get(conn, vis, doc_id, req.version)
        if row is None:
            raise document_not_found()
        return knowledge_pb2.GetDocumentResponse(
            document=document_message(row, with_content=req.include_content)
        )

    async def list_page(
        self, caller: Caller, req: knowledge_pb2.ListDocumentsRequest, timeout_ms: int | None = None
    ) -> knowledge_pb2.ListDocumentsResponse:
        size = self.memories.page_size("page_size", req.page_size, DEFAULT_PAGE_SIZE)
        collection = check.name("collection", req.collection)
        after = None
        if req.page_token:
            data = self.memories.tokens.decode(
                caller, "page_token", req.page_token, kind=cursors.Kind.DOCUMENTS
            )
            after = cursors.get_uuid("page_token", data, "d")
        vis = self.memories.visibility(caller)
        async with self.memories.tx(
            caller, timeout_ms=timeout_ms, readonly=True, replica=True
        ) as conn:
            rows = await sql.list_page(conn, vis, collection, after, size + 1)
        token = ""
        if len(rows) > size:
            rows = rows[:size]
            token = self.memories.tokens.encode(
                caller, {"d": str(rows[-1]["document_id"])}, kind=cursors.Kind.DOCUMENTS
            )
        return knowledge_pb2.ListDocumentsResponse(
            documents=[document_message(r) for r in rows], next_page_token=token
        )

    async def delete(
        self,
        caller: Caller,
        req: knowledge_pb2.DeleteDocumentRequest,
        timeout_ms: int | None = None,
    ) -> knowledge_pb2.DeleteDocumentResponse:
        doc_id = document_id("id", req.id)
        vis = self.memories.visibility(caller)
        async with self.memories.tx(caller, timeout_ms=timeout_ms) as conn:
            current = await sql.lock_current(conn, vis, doc_id)
            if current is None:
                raise document_not_found()
            if not current["writable"]:
                # PERMISSION_DENIED says nothing new only to a key that can read the document.
                if not caller.has(Permission.KNOWLEDGE_READ.value):
                    raise document_not_found()
                raise PermissionDenied(
                    f"id: document {req.id} is outside this key's write scope: a key confined "
                    "to a user (or session) deletes only that user's (or session's) documents"
                )
            if current["status"] == "deleted":  # deleting twice is a no-op
                return knowledge_pb2.DeleteDocumentResponse(id=req.id, version=current["version"])
            # Each content the document ever had stays out of its collection (tombstones),
            # but one another document of the collection holds now (the file was moved to
            # another path, as `brain ingest --prune` sees a rename) was not rejected.
            where = (current["namespace"], current["user_id"], current["session_id"],
                     current["collection"])  # fmt: skip
            texts = await tombstones.contents(conn, current["tenant_id"], doc_id)
            digests = {text: hashlib.sha256(text.encode()).digest() for text in texts}
            held = await sql.held_elsewhere(
                conn, vis, current["tenant_id"], where, doc_id, list(set(digests.values()))
            )
            loop, pepper = asyncio.get_running_loop(), self.memories.pepper
            fingerprints = [
                await loop.run_in_executor(_chunkers, content_fingerprint, pepper, text)
                for text in texts
                if digests[text] not in held
            ]
            await tombstones.lock_contents(conn, current["tenant_id"], where, fingerprints)
            await sql.erase(conn, current["tenant_id"], doc_id)
            at = await sql.clock(conn)
            version = await sql.insert_deletion(
                conn, current, at, caller.principal, caller.key.key_id
            )
            await tombstones.add(conn, current, fingerprints, caller.principal)
        return knowledge_pb2.DeleteDocumentResponse(id=req.id, version=version)

    async def search(
        self,
        caller: Caller,
        req: knowledge_pb2.SearchKnowledgeRequest,
        timeout_ms: int | None = None,
    ) -> Found:
        """SearchKnowledge (see `search.ChunkSearch`)."""
        return await self.searching.search(caller, req, timeout_ms)
