"""BuildContext: the best matches for a query packed into a token budget for a prompt."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from brain.server.domain import convert
from brain.server.errors import InvalidArgument
from brain.v1 import memory_pb2

if TYPE_CHECKING:
    from brain.server.domain.retrieval.lanes import FusedHit as Hit

DEFAULT_TOKEN_BUDGET = 1000
MAX_TOKEN_BUDGET = 32_000
DEFAULT_MAX_MEMORIES = 20
HEADER = "Relevant memories from the shared brain (id, validity, status, score):"


def estimate_tokens(text: str) -> int:
    """About four characters a token for English; never zero for non-empty text."""
    return max(1, (len(text) + 3) // 4) if text else 0


def _when(value: datetime | None) -> str:
    return value.date().isoformat() if value is not None else "open"


def line_for(hit: Hit) -> str:
    row = hit.row
    return (
        f"- [{row['memory_id']}] ({_when(row['valid_from'])} to {_when(row['valid_to'])}, "
        f"{row['status']}, {hit.score:.3f}) {row['content']}"
    )


def budget(req: memory_pb2.BuildContextRequest) -> tuple[int, int]:
    tokens = req.token_budget or DEFAULT_TOKEN_BUDGET
    if not 0 < tokens <= MAX_TOKEN_BUDGET:
        raise InvalidArgument("token_budget", f"must be between 1 and {MAX_TOKEN_BUDGET}")
    count = req.max_memories or DEFAULT_MAX_MEMORIES
    if not 0 < count <= 100:
        raise InvalidArgument("max_memories", "must be between 1 and 100")
    return tokens, count


def pack(hits: Sequence[Hit], token_budget: int) -> memory_pb2.BuildContextResponse:
    """Greedy in score order: take each hit whose line still fits the budget."""
    used = estimate_tokens(HEADER)
    lines: list[str] = []
    items: list[memory_pb2.ContextItem] = []
    for hit in hits:
        line = line_for(hit)
        cost = estimate_tokens(line)
        if used + cost > token_budget:
            continue
        used += cost
        lines.append(line)
        item = memory_pb2.ContextItem(
            id=str(hit.row["memory_id"]),
            score=hit.score,
            status=convert.STATUS_TO_PROTO[hit.row["status"]],
            tokens=cost,
            content=hit.row["content"],
        )
        for name in ("valid_from", "valid_to"):
            stamp = convert.ts(hit.row[name])
            if stamp is not None:
                getattr(item, name).CopyFrom(stamp)
        items.append(item)
    context = "\n".join([HEADER, *lines]) if lines else ""
    return memory_pb2.BuildContextResponse(
        context=context,
        items=items,
        tokens_used=used if lines else 0,
        omitted=len(hits) - len(items),
    )
