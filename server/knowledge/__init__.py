"""The knowledge base: documents in collections, chunked by structure, searched like memories."""

from .chunking import Chunk, chunk, detect_format
from .documents import DOCUMENT_NOT_FOUND, Found, Knowledge, document_not_found

__all__ = [
    "DOCUMENT_NOT_FOUND",
    "Chunk",
    "Found",
    "Knowledge",
    "chunk",
    "detect_format",
    "document_not_found",
]
