"""BuildContext: the best matches for a query packed into a token budget for a prompt.

Memories and knowledge chunks (for keys holding ``knowledge:read``) are interleaved by
their fused score — each normalised within its own search, so the best of each leads —
each list in its search's own order (a newer update above the statement it changes), and
every item says what it is and where it comes from, so an agent can cite it.

A chosen chunk is shown with its neighbours in the document (`Neighbours`: the chunks
next to it, of its own section) when the budget allows: a chunk cut from a long section
then reads with what comes before and after it. Neighbours use only budget that every
chosen hit left over, so they never push a hit out (docs: Knowledge base, for how that
choice was measured).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from brain.server.domain import convert
from brain.server.errors import InvalidArgument
from brain.v1 import common_pb2, memory_pb2

if TYPE_CHECKING:
    from brain.server.domain.retrieval.lanes import FusedHit as Hit

DEFAULT_TOKEN_BUDGET = 1000
MAX_TOKEN_BUDGET = 32_000
DEFAULT_MAX_MEMORIES = 20
HEADER = "Relevant memories from the shared brain (id, validity, status, score):"
MIXED_HEADER = (
    "Relevant memories (id, validity, status, score) and documents (collection/path, "
    "section, lines, score) from the shared brain:"
)


# Scripts a tokenizer reads about a character a token (MiniLM's WordPiece splits every CJK
# ideograph apart): Han, kana, Hangul, their punctuation and full-width forms.
_WIDE = re.compile(
    "[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003ffff]"
)


def estimate_tokens(text: str) -> int:
    """About four characters a token for alphabetic scripts, one for each character of
    the wide ones (Chinese, Japanese, Korean: four a token overshot a budget 2.6 times);
    never zero for non-empty text."""
    if not text:
        return 0
    wide = len(_WIDE.findall(text))
    return max(1, wide + (len(text) - wide + 3) // 4)


def _when(value: datetime | None) -> str:
    return value.date().isoformat() if value is not None else "open"


def line_for(hit: Hit, conflicts: Sequence[common_pb2.Conflict] = ()) -> str:
    row = hit.row
    return (
        f"- [{row['memory_id']}] ({_when(row['valid_from'])} to {_when(row['valid_to'])}, "
        f"{row['status']}, {hit.score:.3f}) {row['content']}{conflict_note(row, conflicts)}"
    )


def conflict_note(row: Any, conflicts: Sequence[common_pb2.Conflict]) -> str:
    """ " [may be outdated: ...]" for the older memory of an open conflict, " [conflicts
    with ...]" for the newer: what a reader sees instead of a silent stale answer."""
    me = str(row["memory_id"])
    newer = [c.newer_id for c in conflicts if c.older_id == me]
    older = [c.older_id for c in conflicts if c.newer_id == me]
    note = ""
    if newer:
        note += f" [may be outdated: {', '.join(newer)} may replace it, pending review]"
    if older:
        note += f" [conflicts with {', '.join(older)}, pending review]"
    return note


@dataclass(frozen=True)
class Passage:
    """What a knowledge item shows: a chunk, or a chunk with its neighbours."""

    content: str
    line_start: int
    line_end: int


# The chunks next to each chosen chunk, by chunk id, in document order.
Neighbours = Mapping[Any, Sequence[Any]]


def passage(hit: Any, around: Sequence[Any] = ()) -> Passage:
    """The hit's text with its neighbours, in line order; lines two chunks share (code
    windows overlap) are shown once, and the blank lines between two chunks are kept.
    Chunks that cover the same line with different text (a long line cut at characters)
    are joined whole."""
    rows = sorted([hit, *around], key=lambda r: (r["line_start"], r["line_end"], r["chunk_no"]))
    lines: list[str] = []
    end = 0  # the last line shown
    for row in rows:
        text = row["content"].split("\n")
        if lines and row["line_start"] > end + 1:
            # The blank lines between two chunks belong to neither: without them the
            # passage would not be the lines it cites, and paragraphs would run together.
            lines += [""] * (row["line_start"] - end - 1)
        shared = min(max(0, end - row["line_start"] + 1), len(text))
        if shared and lines[-shared:] == text[:shared]:
            text = text[shared:]
        lines += text
        end = max(end, row["line_end"])
    return Passage("\n".join(lines), rows[0]["line_start"], end)


def chunk_line(hit: Hit, shown: Passage | None = None) -> str:
    row = hit.row
    shown = shown or Passage(row["content"], row["line_start"], row["line_end"])
    where = f"{row['collection']}/{row['path']}"
    if row["heading_path"]:
        where += " § " + " > ".join(row["heading_path"])
    return (
        f"- [doc {where}, lines {shown.line_start}-{shown.line_end}] ({hit.score:.3f}) "
        f"{shown.content}"
    )


def budget(req: memory_pb2.BuildContextRequest) -> tuple[int, int]:
    tokens = req.token_budget or DEFAULT_TOKEN_BUDGET
    if not 0 < tokens <= MAX_TOKEN_BUDGET:
        raise InvalidArgument("token_budget", f"must be between 1 and {MAX_TOKEN_BUDGET}")
    count = req.max_memories or DEFAULT_MAX_MEMORIES
    if not 0 < count <= 100:
        raise InvalidArgument("max_memories", "must be between 1 and 100")
    return tokens, count


def _merged(hits: Sequence[Hit], chunks: Sequence[Hit]) -> list[tuple[Hit, bool]]:
    """Memories and chunks (True) in one order, by score, each list keeping its own order:
    the search's order of memories is not only by score (a newer update ranks above the
    statement it changes, a reranker reorders), and packing by score alone undid it."""
    out: list[tuple[Hit, bool]] = []
    m = c = 0
    while m < len(hits) or c < len(chunks):
        if c == len(chunks) or (m < len(hits) and hits[m].score >= chunks[c].score):
            out.append((hits[m], False))  # memories first on ties
            m += 1
        else:
            out.append((chunks[c], True))
            c += 1
    return out


def pack(
    hits: Sequence[Hit],
    token_budget: int,
    chunks: Sequence[Hit] = (),
    conflicts: Mapping[Any, Sequence[common_pb2.Conflict]] | None = None,
    around: Neighbours | None = None,
) -> memory_pb2.BuildContextResponse:
    """Greedy in the merged order (`_merged`): take each hit whose line still fits the
    budget; then show chosen chunks with their neighbours while the budget allows (see
    the module)."""
    around = around or {}
    header = MIXED_HEADER if chunks else HEADER
    used = estimate_tokens(header)
    taken: list[tuple[Hit, bool, str, Passage | None, Sequence[common_pb2.Conflict]]] = []
    tagged = _merged(hits, chunks)
    marks = conflicts or {}
    for hit, is_chunk in tagged:
        found = () if is_chunk else marks.get(hit.row["memory_id"], ())
        line = chunk_line(hit) if is_chunk else line_for(hit, found)
        cost = estimate_tokens(line)
        if used + cost > token_budget:
            continue
        used += cost
        taken.append((hit, is_chunk, line, None, found))
    # Chunks in the context so far: the chosen ones, then each neighbour shown. Best first;
    # a neighbour that is an item of its own, or already shown beside a better chunk (it
    # lies between two chosen ones), is not shown (nor counted) twice.
    shown_ids = {hit.row["chunk_id"] for hit, is_chunk, *_ in taken if is_chunk}
    for i, (hit, is_chunk, line, _, found) in enumerate(taken):
        if not is_chunk:
            continue
        near = [r for r in around.get(hit.row["chunk_id"], ()) if r["chunk_id"] not in shown_ids]
        if not near:
            continue
        shown = passage(hit.row, near)
        wider = chunk_line(hit, shown)
        extra = estimate_tokens(wider) - estimate_tokens(line)
        if used + extra <= token_budget:
            used += extra
            taken[i] = (hit, True, wider, shown, found)
            shown_ids.update(r["chunk_id"] for r in near)
    lines = [line for _, _, line, *_ in taken]
    items = [
        _chunk_item(hit, estimate_tokens(line), shown)
        if is_chunk
        else _memory_item(hit, estimate_tokens(line), found)
        for hit, is_chunk, line, shown, found in taken
    ]
    context = "\n".join([header, *lines]) if lines else ""
    return memory_pb2.BuildContextResponse(
        context=context,
        items=items,
        tokens_used=used if lines else 0,
        omitted=len(tagged) - len(items),
    )


def _memory_item(
    hit: Hit, cost: int, conflicts: Sequence[common_pb2.Conflict] = ()
) -> memory_pb2.ContextItem:
    item = memory_pb2.ContextItem(
        id=str(hit.row["memory_id"]),
        score=hit.score,
        status=convert.STATUS_TO_PROTO[hit.row["status"]],
        tokens=cost,
        content=hit.row["content"],
        kind=memory_pb2.CONTEXT_ITEM_KIND_MEMORY,
        conflicts=conflicts,
    )
    for name in ("valid_from", "valid_to"):
        stamp = convert.ts(hit.row[name])
        if stamp is not None:
            getattr(item, name).CopyFrom(stamp)
    return item


def _chunk_item(hit: Hit, cost: int, shown: Passage | None) -> memory_pb2.ContextItem:
    row = hit.row
    source = convert.chunk_source(row)
    if shown is not None:  # the lines shown, the chunk's neighbours included
        source.line_start, source.line_end = shown.line_start, shown.line_end
    return memory_pb2.ContextItem(
        id=str(row["chunk_id"]),
        score=hit.score,
        tokens=cost,
        content=shown.content if shown is not None else row["content"],
        kind=memory_pb2.CONTEXT_ITEM_KIND_KNOWLEDGE,
        source=source,
    )
