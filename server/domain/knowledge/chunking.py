"""Cutting a document into chunks that follow its structure.

- Markdown: one section per heading (parsed by markdown-it-py, so a ``#`` inside a code
  fence is no heading); a chunk carries its heading path, outermost first. A heading with
  nothing under it but a subheading starts that subsection's chunk instead of being one.
- Python: one chunk per top-level definition (function, class, with its decorators), read
  with the standard library's own parser; the statements between definitions (imports,
  constants, the module docstring) form chunks of their own. Source that does not parse
  falls back to the code rule.
- Other code: windows of lines that overlap, so a statement cut at a window's end is
  whole in the next one.
- Plain text: paragraphs, consecutive small ones packed together.

Every chunk knows its 1-based, inclusive line range. Sizes follow a ``Measure``
(``measures.py``): the embedder's window in its own tokens, the chunk's heading path
included, or characters. A section over the limit is split at paragraph breaks, then at
lines, then (one huge line) where a token starts; every piece keeps its heading path.

Chunking is bounded, so that no document of the allowed size costs more than about a second
of CPU: Markdown is parsed for its block structure only (headings need no inline markup,
whose parser is the slow part on adversarial input), and a document with more than
``MAX_LINES`` lines, ``MAX_HEADINGS`` heading lines or ``MAX_CHUNKS`` chunks is refused
(``TooComplex``) before or while it is cut.
"""

from __future__ import annotations

import ast
import itertools
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

from markdown_it import MarkdownIt

from brain.server.domain.knowledge.measures import MAX_CHUNK_CHARS, Characters, Measure

__all__ = ["FORMATS", "MAX_CHUNK_CHARS", "Chunk", "TooComplex", "chunk", "detect_format"]

# One ast.parse at a time: puts are chunked on a thread pool, and CPython before 3.11.8
# can fail a parse that runs beside another with "SystemError: AST constructor recursion
# depth mismatch" (python/cpython#106905; an outside review's ingest got INTERNAL for a
# batch of 14 files). A SystemError still falls back to line windows, as a syntax error does.
_PARSING = threading.Lock()


def _parse(text: str) -> ast.Module:
    with _PARSING:
        return ast.parse(text)


CODE_WINDOW_LINES = 40
CODE_OVERLAP_LINES = 8
FORMATS = ("markdown", "python", "code", "text")
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown", ".mdx", ".rst"})
CODE_SUFFIXES = frozenset(
    {".c", ".cc", ".cpp", ".h", ".hpp", ".go", ".rs", ".java", ".kt", ".js", ".jsx", ".ts",
     ".tsx", ".rb", ".php", ".cs", ".swift", ".scala", ".sh", ".bash", ".sql", ".proto",
     ".toml", ".yaml", ".yml", ".json", ".ini", ".cfg", ".mk", ".lua", ".r", ".pl"}
)  # fmt: skip
CODE_NAMES = frozenset({"Makefile", "Dockerfile", "Justfile"})
MAX_LINES = 100_000
MAX_HEADINGS = 2_000
MAX_CHUNKS = 4_000
# What could be a Markdown heading: an ATX heading or a setext underline (counted before
# parsing; thematic breaks count too, so the count errs on the safe side).
_HEADING_LINE = re.compile(r"^ {0,3}(?:#{1,6}(?:[ \t]|$)|=+[ \t]*$|-+[ \t]*$)", re.MULTILINE)


class TooComplex(ValueError):
    """A document whose structure exceeds the chunking limits; the message says which."""


@dataclass(frozen=True, slots=True)
class Chunk:
    content: str
    heading_path: tuple[str, ...]
    line_start: int  # 1-based, inclusive
    line_end: int


def detect_format(path: str) -> str:
    """The chunking rule for a path: by extension, plain text when unknown."""
    p = PurePosixPath(path)
    suffix = p.suffix.lower()
    if suffix in MARKDOWN_SUFFIXES:
        return "markdown"
    if suffix in (".py", ".pyi"):
        return "python"
    if suffix in CODE_SUFFIXES or p.name in CODE_NAMES:
        return "code"
    return "text"


def chunk(
    text: str, fmt: str, max_chars: int = MAX_CHUNK_CHARS, *, measure: Measure | None = None
) -> list[Chunk]:
    """The chunks of ``text`` under the rule ``fmt`` (one of FORMATS), each within
    ``measure`` (default: ``max_chars`` characters); ``TooComplex`` when the document has
    more lines, headings or chunks than the limits allow. A leading byte-order mark is no
    part of the first line: it hid a first heading and a module's structure."""
    text = text.removeprefix("\ufeff")  # on line 1, before any newline: line numbers hold
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise TooComplex(f"has {len(lines)} lines; the limit is {MAX_LINES} per document")
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    if fmt == "markdown":
        headings = sum(1 for _ in itertools.islice(_HEADING_LINE.finditer(text), MAX_HEADINGS + 1))
        if headings > MAX_HEADINGS:
            raise TooComplex(
                f"has more than {MAX_HEADINGS} heading lines; the limit is {MAX_HEADINGS} "
                "per Markdown document (split it, or put it as format TEXT)"
            )
    cutter = _Cutter(lines, measure or Characters(max_chars))
    if fmt == "markdown":
        pieces = cutter.markdown(text)
    elif fmt == "python":
        pieces = cutter.python(text)
    elif fmt == "code":
        pieces = cutter.windows(0, len(lines), ())
    else:
        pieces = cutter.blocks(0, len(lines), ())
    kept = list(itertools.islice((c for c in pieces if c.content.strip()), MAX_CHUNKS + 1))
    if len(kept) > MAX_CHUNKS:
        raise TooComplex(
            f"would make more than {MAX_CHUNKS} chunks; the limit is {MAX_CHUNKS} per document"
        )
    return kept


class _Cutter:
    """One document's lines, each measured once; the rules cut ranges of them (0-based,
    end exclusive) into chunks whose text is exactly the lines of their range."""

    def __init__(self, lines: list[str], measure: Measure) -> None:
        self.lines = lines
        self.measure = measure
        self.sums = list(itertools.accumulate(measure.lines(lines), initial=0))

    def size(self, start: int, end: int) -> int:
        """The measure of lines[start:end] joined by newlines."""
        return self.sums[end] - self.sums[start] + self.measure.newline * max(end - start - 1, 0)

    def budget(self, path: tuple[str, ...]) -> int:
        """What a chunk under ``path`` may measure (its heading prefix takes its share)."""
        return max(self.measure.limit - self.measure.reserve(path), 1)

    def piece(self, start: int, end: int, path: tuple[str, ...]) -> Chunk:
        return Chunk("\n".join(self.lines[start:end]), path, start + 1, max(end, start + 1))

    def markdown(self, text: str) -> Iterator[Chunk]:
        # Block structure only (a parser per call: chunking runs on worker threads).
        tokens = MarkdownIt("commonmark").disable("inline").parse(text)
        # (first line, level, title) of each heading, 0-based lines.
        headings: list[tuple[int, int, str]] = []
        tokens_end: dict[int, int] = {}  # first line of a heading -> the line after it
        for i, token in enumerate(tokens):
            if token.type == "heading_open" and token.map is not None:
                title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
                headings.append((token.map[0], int(token.tag[1:]), " ".join(title.split())))
                tokens_end[token.map[0]] = token.map[1]
        lines = self.lines
        stack: list[tuple[int, str]] = []
        starts = [h[0] for h in headings]
        if not starts or starts[0] > 0:
            yield from self.blocks(0, starts[0] if starts else len(lines), ())
        carried: int | None = None
        for n, (start, level, title) in enumerate(headings):
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            end = starts[n + 1] if n + 1 < len(starts) else len(lines)
            body_from = tokens_end.get(start, start + 1)
            first = start if carried is None else carried
            if end < len(lines) and not any(line.strip() for line in lines[body_from:end]):
                carried = first  # a heading with nothing under it opens the next section's chunk
                continue
            carried = None
            yield from self.blocks(first, end, tuple(t for _, t in stack))

    def python(self, text: str) -> Iterator[Chunk]:
        try:
            tree = _parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError, SystemError):
            yield from self.windows(0, len(self.lines), ())
            return
        definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        covered = 0  # lines[:covered] are chunked already
        for node in tree.body:
            if not isinstance(node, definitions) or node.end_lineno is None:
                continue
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            if first > covered:
                yield from self.blocks(covered, first, ())
            yield from self.windows(first, node.end_lineno, (node.name,))
            covered = node.end_lineno
        if covered < len(self.lines):
            yield from self.blocks(covered, len(self.lines), ())

    def windows(self, start: int, end: int, path: tuple[str, ...]) -> Iterator[Chunk]:
        """Code: the whole span when it fits, else windows of at most CODE_WINDOW_LINES
        lines that fit, each overlapping the last by up to CODE_OVERLAP_LINES (a fifth of
        its length at most), so a statement cut at a window's end is whole in the next."""
        budget = self.budget(path)
        if self.size(start, end) <= budget and end - start <= CODE_WINDOW_LINES * 2:
            yield self.piece(start, end, path)
            return
        at = start
        while at < end:
            stop = at
            while (
                stop < end and stop - at < CODE_WINDOW_LINES and self.size(at, stop + 1) <= budget
            ):
                stop += 1
            if stop == at:  # one line over the budget: cut where its tokens start
                yield from self.fit(at, at + 1, path)
                at += 1
                continue
            yield self.piece(at, stop, path)
            if stop >= end:
                return
            at = max(stop - min(CODE_OVERLAP_LINES, (stop - at) // 5), at + 1)

    def blocks(self, start: int, end: int, path: tuple[str, ...]) -> Iterator[Chunk]:
        """Paragraphs (split at blank lines), packed together while they fit."""
        budget = self.budget(path)
        packed: int | None = None  # first line of the paragraphs packed so far
        packed_end = start
        for first, stop in self.paragraphs(start, end):
            if packed is not None and self.size(packed, stop) > budget:
                yield self.piece(packed, packed_end, path)
                packed = None
            if packed is None:
                if self.size(first, stop) > budget:
                    yield from self.fit(first, stop, path)
                    continue
                packed = first
            packed_end = stop
        if packed is not None:
            yield self.piece(packed, packed_end, path)

    def paragraphs(self, start: int, end: int) -> Iterator[tuple[int, int]]:
        """(first, end) of each run of non-blank lines in lines[start:end]."""
        first: int | None = None
        for i in range(start, end):
            if self.lines[i].strip():
                if first is None:
                    first = i
            elif first is not None:
                yield first, i
                first = None
        if first is not None:
            yield first, end

    def fit(self, start: int, end: int, path: tuple[str, ...]) -> Iterator[Chunk]:
        """Lines packed while they fit; a single line over the budget is cut into pieces."""
        budget = self.budget(path)
        packed: int | None = None
        for i in range(start, end):
            if self.size(i, i + 1) > budget:
                if packed is not None:
                    yield self.piece(packed, i, path)
                    packed = None
                for part in self.measure.cut(self.lines[i], budget):
                    yield Chunk(part, path, i + 1, i + 1)
                continue
            if packed is not None and self.size(packed, i + 1) > budget:
                yield self.piece(packed, i, path)
                packed = None
            if packed is None:
                packed = i
        if packed is not None:
            yield self.piece(packed, end, path)
