"""How big a chunk may be, and the text its vector is made from.

A chunk's vector is made from its heading path and its text (``embedding_text``), so a
piece cut from the middle of a long section still says which section it belongs to. With
an embedder whose window the server knows (the local model: 256 WordPiece tokens, two of
them its [CLS] and [SEP]), chunks are measured in that model's own tokens (``Tokens``),
so the model reads every chunk whole, headings included; otherwise (no embedder, or an
HTTP endpoint whose tokenizer the server cannot see) in characters (``Characters``).

A measure is additive over lines: the size of lines joined by newlines is the sum of their
sizes plus ``newline`` per break. WordPiece splits at whitespace first, so its count of a
text is exactly the sum of its lines' counts; the chunker counts each line once, with one
tokenizer call per document.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

MAX_CHUNK_CHARS = 2000
# A heading path longer than this is shortened to its innermost headings before it is put
# in front of a chunk's text: it may take only a small part of the window.
PREFIX_MAX_CHARS = 120
# With tokens, a line also counts at least one token per this many characters, so a chunk
# keeps about the old 2,000-character cap even where the tokenizer sees few tokens (a long
# word is a single [UNK]).
CHARS_PER_TOKEN_AT_MOST = 8
PATH_SEPARATOR = " > "


def heading_prefix(heading_path: Sequence[str]) -> str:
    """The heading path as it is put before a chunk's text: ``Deploy > Rollback``, at most
    ``PREFIX_MAX_CHARS`` characters, keeping the innermost headings."""
    kept: list[str] = []
    size = 0
    for title in reversed(heading_path):
        added = len(title) + (len(PATH_SEPARATOR) if kept else 0)
        if size + added > PREFIX_MAX_CHARS:
            if not kept:
                kept.append(title[:PREFIX_MAX_CHARS])
            break
        kept.append(title)
        size += added
    return PATH_SEPARATOR.join(reversed(kept))


def embedding_text(heading_path: Sequence[str], content: str) -> str:
    """What a chunk's vector is made from: its heading path on a line of its own, then its
    text (the text alone when it has no heading)."""
    prefix = heading_prefix(heading_path)
    return f"{prefix}\n{content}" if prefix else content


class TokenCounter(Protocol):
    """An embedder's tokenizer as chunking sees it (``embedders.WordPieceCounter``)."""

    window: int  # tokens the model reads of one text, its own special tokens included
    overhead: int  # special tokens the model adds to every text

    def count(self, texts: Sequence[str]) -> list[int]: ...

    def offsets(self, text: str) -> list[tuple[int, int]]: ...


class Measure(Protocol):
    """How chunks are sized: each line's size, the cost of a line break, the most one chunk
    may measure, what a chunk's heading prefix takes of that, and how a line over it is cut."""

    @property
    def limit(self) -> int: ...

    @property
    def newline(self) -> int: ...

    def lines(self, lines: Sequence[str]) -> list[int]: ...

    def reserve(self, heading_path: Sequence[str]) -> int: ...

    def cut(self, line: str, limit: int) -> list[str]: ...


@dataclass(frozen=True)
class Characters:
    """Chunks of at most ``limit`` characters; the heading prefix is not counted (there is
    no model window to fit)."""

    limit: int = MAX_CHUNK_CHARS
    newline: int = 1

    def lines(self, lines: Sequence[str]) -> list[int]:
        return [len(line) for line in lines]

    def reserve(self, heading_path: Sequence[str]) -> int:
        return 0

    def cut(self, line: str, limit: int) -> list[str]:
        return [line[at : at + limit] for at in range(0, len(line), max(limit, 1))]


class Tokens:
    """Chunks whose ``embedding_text`` fits the model's window, counted by its tokenizer."""

    newline = 0  # a line break is whitespace: it adds no token

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.limit = counter.window - counter.overhead
        self._reserved: dict[tuple[str, ...], int] = {}

    def lines(self, lines: Sequence[str]) -> list[int]:
        counts = self.counter.count(lines)
        most = CHARS_PER_TOKEN_AT_MOST
        return [max(n, -(-len(line) // most)) for n, line in zip(counts, lines, strict=True)]

    def text(self, text: str) -> int:
        return sum(self.lines(text.splitlines() or [text]))

    def reserve(self, heading_path: Sequence[str]) -> int:
        key = tuple(heading_path)
        found = self._reserved.get(key)
        if found is None:
            prefix = heading_prefix(key)
            found = self.text(prefix) if prefix else 0
            if len(self._reserved) > 10_000:  # a cache, not a leak
                self._reserved.clear()
            self._reserved[key] = found
        return found

    def cut(self, line: str, limit: int) -> list[str]:
        """``line`` in pieces of at most ``limit`` tokens (and ``limit`` x 8 characters),
        cut where a token starts, at the start of a word when one is near."""
        limit = max(limit, 1)
        most = limit * CHARS_PER_TOKEN_AT_MOST
        starts = [start for start, _ in self.counter.offsets(line)]
        pieces: list[str] = []
        begin, first = 0, 0  # first: the first token starting at or after begin
        while begin < len(line):
            while first < len(starts) and starts[first] < begin:
                first += 1
            after = first + limit  # the first token that no longer fits
            at = min(starts[after] if after < len(starts) else len(line), begin + most)
            if after < len(starts) and at == starts[after]:
                at = self._word_start(line, starts, first, after)
            at = max(at, begin + 1)
            pieces.extend(self._within(line[begin:at], limit))
            begin = at
        return [p for p in pieces if p]

    @staticmethod
    def _word_start(line: str, starts: list[int], first: int, after: int) -> int:
        """Where to cut before token ``after``: the start of the last token in the second
        half of the piece that begins a word (follows whitespace), else token ``after``."""
        for k in range(after, first + (after - first) // 2, -1):
            if starts[k] > 0 and line[starts[k] - 1].isspace():
                return starts[k]
        return starts[after]

    def _within(self, piece: str, limit: int) -> list[str]:
        """``piece`` halved until each part measures at most ``limit`` (a subword cut can
        count differently alone than it did inside its word)."""
        if len(piece) <= 1 or self.text(piece) <= limit:
            return [piece]
        mid = len(piece) // 2
        return self._within(piece[:mid], limit) + self._within(piece[mid:], limit)


def measure_for(embedder: Any) -> Measure:
    """Tokens of the embedder's own tokenizer when it has one the server can run (the local
    model), else characters."""
    counter = getattr(embedder, "token_counter", None)
    if callable(counter):
        found = counter()
        if found is not None:
            return Tokens(found)
    return Characters()
