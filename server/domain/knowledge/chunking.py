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

Every chunk knows its 1-based, inclusive line range. A section over ``max_chars`` is
split at paragraph breaks, then at lines, then (one huge line) at characters.

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

from markdown_it import MarkdownIt

MAX_CHUNK_CHARS = 2000
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


def chunk(text: str, fmt: str, max_chars: int = MAX_CHUNK_CHARS) -> list[Chunk]:
    """The chunks of ``text`` under the rule ``fmt`` (one of FORMATS); ``TooComplex`` when
    the document has more lines, headings or chunks than the limits allow."""
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise TooComplex(f"has {len(lines)} lines; the limit is {MAX_LINES} per document")
    if fmt == "markdown":
        headings = sum(1 for _ in itertools.islice(_HEADING_LINE.finditer(text), MAX_HEADINGS + 1))
        if headings > MAX_HEADINGS:
            raise TooComplex(
                f"has more than {MAX_HEADINGS} heading lines; the limit is {MAX_HEADINGS} "
                "per Markdown document (split it, or put it as format TEXT)"
            )
        pieces = _markdown(text, lines, max_chars)
    elif fmt == "python":
        pieces = _python(text, lines, max_chars)
    elif fmt == "code":
        pieces = _windows(lines, 1, (), max_chars)
    elif fmt == "text":
        pieces = _blocks(lines, 1, (), max_chars)
    else:
        raise ValueError(f"unknown format {fmt!r}")
    kept = list(itertools.islice((c for c in pieces if c.content.strip()), MAX_CHUNKS + 1))
    if len(kept) > MAX_CHUNKS:
        raise TooComplex(
            f"would make more than {MAX_CHUNKS} chunks; the limit is {MAX_CHUNKS} per document"
        )
    return kept


def _markdown(text: str, lines: list[str], max_chars: int) -> Iterator[Chunk]:
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
    stack: list[tuple[int, str]] = []
    starts = [h[0] for h in headings]
    if not starts or starts[0] > 0:
        yield from _blocks(lines[: starts[0] if starts else len(lines)], 1, (), max_chars)
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
        path = tuple(t for _, t in stack)
        yield from _blocks(lines[first:end], first + 1, path, max_chars)


def _python(text: str, lines: list[str], max_chars: int) -> Iterator[Chunk]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        yield from _windows(lines, 1, (), max_chars)
        return
    definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    covered = 0  # lines[:covered] are chunked already (0-based, exclusive)
    for node in tree.body:
        if not isinstance(node, definitions) or node.end_lineno is None:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        if first > covered:
            yield from _blocks(lines[covered:first], covered + 1, (), max_chars)
        yield from _windows(lines[first : node.end_lineno], first + 1, (node.name,), max_chars)
        covered = node.end_lineno
    if covered < len(lines):
        yield from _blocks(lines[covered:], covered + 1, (), max_chars)


def _windows(
    lines: list[str], first_line: int, path: tuple[str, ...], max_chars: int
) -> Iterator[Chunk]:
    """Code: the whole span when it fits, else overlapping windows of lines."""
    if len("\n".join(lines)) <= max_chars and len(lines) <= CODE_WINDOW_LINES * 2:
        yield Chunk("\n".join(lines), path, first_line, first_line + max(len(lines), 1) - 1)
        return
    step = CODE_WINDOW_LINES - CODE_OVERLAP_LINES
    for at in range(0, max(len(lines) - CODE_OVERLAP_LINES, 1), step):
        window = lines[at : at + CODE_WINDOW_LINES]
        yield from _fit(window, first_line + at, path, max_chars)


def _blocks(
    lines: list[str], first_line: int, path: tuple[str, ...], max_chars: int
) -> Iterator[Chunk]:
    """Paragraphs (split at blank lines), packed together while they fit ``max_chars``."""
    packed: list[str] = []
    packed_start = first_line
    for start, block in _paragraphs(lines, first_line):
        joined = "\n".join([*packed, "", *block]) if packed else "\n".join(block)
        if packed and len(joined) > max_chars:
            yield Chunk("\n".join(packed), path, packed_start, packed_start + len(packed) - 1)
            packed = []
        if not packed:
            packed_start = start
            if len("\n".join(block)) > max_chars:
                yield from _fit(block, start, path, max_chars)
                continue
            packed = list(block)
        else:
            # Keep the blank lines between paragraphs so the line range stays exact.
            packed.extend([""] * (start - (packed_start + len(packed))) + block)
    if packed:
        yield Chunk("\n".join(packed), path, packed_start, packed_start + len(packed) - 1)


def _paragraphs(lines: list[str], first_line: int) -> Iterator[tuple[int, list[str]]]:
    block: list[str] = []
    start = first_line
    for i, line in enumerate(lines):
        if line.strip():
            if not block:
                start = first_line + i
            block.append(line)
        elif block:
            yield start, block
            block = []
    if block:
        yield start, block


def _fit(
    lines: list[str], first_line: int, path: tuple[str, ...], max_chars: int
) -> Iterator[Chunk]:
    """Lines packed up to ``max_chars``; a single longer line is cut at characters."""
    packed: list[str] = []
    start = first_line
    for i, line in enumerate(lines):
        number = first_line + i
        if len(line) > max_chars:
            if packed:
                yield Chunk("\n".join(packed), path, start, number - 1)
                packed = []
            for at in range(0, len(line), max_chars):
                yield Chunk(line[at : at + max_chars], path, number, number)
            continue
        if packed and len("\n".join([*packed, line])) > max_chars:
            yield Chunk("\n".join(packed), path, start, number - 1)
            packed = []
        if not packed:
            start = number
        packed.append(line)
    if packed:
        yield Chunk("\n".join(packed), path, start, first_line + len(lines) - 1)
