"""The knowledge base: documents in collections, chunked by structure, searched like memories."""

from brain.server.domain.knowledge.chunking import Chunk, chunk, detect_format
from brain.server.domain.knowledge.documents import (
    DOCUMENT_NOT_FOUND,
    Knowledge,
    document_not_found,
)
from brain.server.domain.knowledge.search import Found

__all__ = [
    "DOCUMENT_NOT_FOUND",
    "Chunk",
    "Found",
    "Knowledge",
    "chunk",
    "detect_format",
    "document_not_found",
]
