# Like _async.py: the client's methods take a per-call timeout, as the blocking ones do.
# ruff: noqa: ASYNC109
"""Knowledge documents for both clients: put (with `readmit_tombstoned`; many at once with
`put_documents`), get, list and delete. Searching them (`search_knowledge`) stays on the
clients beside the other searches.

Mixed into `BrainClient` and `AsyncBrainClient`, which provide the request builder, the
KnowledgeService stub and the call machinery (retries, deadlines, paging)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from brain.clients._requests import Requests
from brain.v1 import knowledge_pb2, knowledge_pb2_grpc


class DocumentMethods:
    """The blocking client's document methods."""

    _requests: Requests
    _knowledge: knowledge_pb2_grpc.KnowledgeServiceStub

    if TYPE_CHECKING:

        def _unary(self, method: str, rpc: Any, request: Any, *, idempotent: bool,
                   timeout: float | None) -> Any: ...  # fmt: skip

        def _pages(self, method: str, rpc: Any, request: Any, items: Any,
                   timeout: float | None) -> Iterator[Any]: ...  # fmt: skip

    def put_document(
        self,
        collection: str,
        path: str,
        content: str,
        *,
        format: knowledge_pb2.DocumentFormat.ValueType = knowledge_pb2.DOCUMENT_FORMAT_UNSPECIFIED,
        labels: Iterable[str] = (),
        readmit_tombstoned: bool = False,
        timeout: float | None = None,
    ) -> knowledge_pb2.PutDocumentResponse:
        """Store a document or its next version; the same content again is a safe no-op."""
        request = self._requests.put_document(collection, path, content, format, labels)
        request.readmit_tombstoned = readmit_tombstoned
        return self._unary(  # type: ignore[no-any-return]
            "PutDocument", self._knowledge.PutDocument, request, idempotent=True, timeout=timeout
        )

    def put_documents(
        self,
        collection: str,
        documents: Iterable[knowledge_pb2.PutDocumentsItem],
        *,
        timeout: float | None = None,
    ) -> list[knowledge_pb2.PutDocumentsResult]:
        """Store up to 100 documents of `collection` in one call, each as `put_document`
        would; one result per document, in order: its put, or the error code and message
        it got (the others are stored all the same). Safe to retry: documents already
        stored answer unchanged (a key without knowledge:read writes another version)."""
        request = self._requests.put_documents(collection, documents)
        response = self._unary(
            "PutDocuments", self._knowledge.PutDocuments, request, idempotent=True,
            timeout=timeout,
        )  # fmt: skip
        return list(response.results)

    def get_document(
        self,
        id: str,
        *,
        version: int = 0,
        include_content: bool = False,
        timeout: float | None = None,
    ) -> knowledge_pb2.GetDocumentResponse:
        """One document (the current version unless `version` is given)."""
        request = self._requests.get_document(id, version, include_content)
        return self._unary(  # type: ignore[no-any-return]
            "GetDocument", self._knowledge.GetDocument, request, idempotent=True, timeout=timeout
        )

    def list_documents(
        self, *, collection: str = "", page_size: int = 0, timeout: float | None = None
    ) -> Iterator[knowledge_pb2.Document]:
        """Every current document (of `collection`), fetched page by page."""
        request = self._requests.list_documents(collection, page_size)
        return self._pages(
            "ListDocuments", self._knowledge.ListDocuments, request, lambda p: p.documents, timeout
        )

    def delete_document(
        self, id: str, *, timeout: float | None = None
    ) -> knowledge_pb2.DeleteDocumentResponse:
        """Erase a document's text in every version and chunk (safe to retry)."""
        request = self._requests.delete_document(id)
        return self._unary(  # type: ignore[no-any-return]
            "DeleteDocument", self._knowledge.DeleteDocument, request, idempotent=True,
            timeout=timeout,
        )  # fmt: skip


class AsyncDocumentMethods:
    """The asyncio client's document methods: the same, awaited."""

    _requests: Requests
    _knowledge: knowledge_pb2_grpc.KnowledgeServiceAsyncStub

    if TYPE_CHECKING:

        async def _unary(self, method: str, rpc: Any, request: Any, *, idempotent: bool,
                         timeout: float | None) -> Any: ...  # fmt: skip

        def _pages(self, method: str, rpc: Any, request: Any, items: Any,
                   timeout: float | None) -> AsyncIterator[Any]: ...  # fmt: skip

    async def put_document(
        self,
        collection: str,
        path: str,
        content: str,
        *,
        format: knowledge_pb2.DocumentFormat.ValueType = knowledge_pb2.DOCUMENT_FORMAT_UNSPECIFIED,
        labels: Iterable[str] = (),
        readmit_tombstoned: bool = False,
        timeout: float | None = None,
    ) -> knowledge_pb2.PutDocumentResponse:
        """Store a document or its next version; the same content again is a safe no-op."""
        request = self._requests.put_document(collection, path, content, format, labels)
        request.readmit_tombstoned = readmit_tombstoned
        return await self._unary(  # type: ignore[no-any-return]
            "PutDocument", self._knowledge.PutDocument, request, idempotent=True, timeout=timeout
        )

    async def put_documents(
        self,
        collection: str,
        documents: Iterable[knowledge_pb2.PutDocumentsItem],
        *,
        timeout: float | None = None,
    ) -> list[knowledge_pb2.PutDocumentsResult]:
        """Store up to 100 documents of `collection` in one call, each as `put_document`
        would; one result per document, in order: its put, or the error code and message
        it got (the others are stored all the same). Safe to retry: documents already
        stored answer unchanged (a key without knowledge:read writes another version)."""
        request = self._requests.put_documents(collection, documents)
        response = await self._unary(
            "PutDocuments", self._knowledge.PutDocuments, request, idempotent=True,
            timeout=timeout,
        )  # fmt: skip
        return list(response.results)

    async def get_document(
        self,
        id: str,
        *,
        version: int = 0,
        include_content: bool = False,
        timeout: float | None = None,
    ) -> knowledge_pb2.GetDocumentResponse:
        """One document (the current version unless `version` is given)."""
        request = self._requests.get_document(id, version, include_content)
        return await self._unary(  # type: ignore[no-any-return]
            "GetDocument", self._knowledge.GetDocument, request, idempotent=True, timeout=timeout
        )

    def list_documents(
        self, *, collection: str = "", page_size: int = 0, timeout: float | None = None
    ) -> AsyncIterator[knowledge_pb2.Document]:
        """Every current document (of `collection`), fetched page by page."""
        request = self._requests.list_documents(collection, page_size)
        return self._pages(
            "ListDocuments", self._knowledge.ListDocuments, request, lambda p: p.documents, timeout
        )

    async def delete_document(
        self, id: str, *, timeout: float | None = None
    ) -> knowledge_pb2.DeleteDocumentResponse:
        """Erase a document's text in every version and chunk (safe to retry)."""
        request = self._requests.delete_document(id)
        return await self._unary(  # type: ignore[no-any-return]
            "DeleteDocument", self._knowledge.DeleteDocument, request, idempotent=True,
            timeout=timeout,
        )  # fmt: skip
