"""The memory domain: `Memories` carries out every memory RPC for an authenticated caller.

Writes live in `writes`, reads in `reads`, who may read a new memory in `placement`, and
what all share in `_common`.
"""

from __future__ import annotations

from brain.server.domain.memories._common import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_SEARCH_LIMIT,
    KnowledgeRecall,
    Limits,
    Recalled,
    ReviewGate,
    fingerprint,
    model_id,
    row_filter,
    time_coords,
)
from brain.server.domain.memories.reads import MemoryReads
from brain.server.domain.memories.writes import MemoryWrites

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "DEFAULT_SEARCH_LIMIT",
    "KnowledgeRecall",
    "Limits",
    "Memories",
    "Recalled",
    "ReviewGate",
    "fingerprint",
    "model_id",
    "row_filter",
    "time_coords",
]


class Memories(MemoryWrites, MemoryReads):
    """Carries out memory RPCs for an authenticated caller."""
