"""A generated source tree of realistic shapes for `brain-bench ingest`.

Markdown (a title, sections and subsections of prose, lists, fenced code, tables), Python
modules (a docstring, imports, constants, classes with methods, functions) and other code
(TypeScript and Go), in folders, with file sizes spread as in a repository (log-normal:
most files a few KB, a few near the 1 MiB ingest limit). Words follow a Zipf-like law over
a vocabulary of English words and made-up identifiers, so the lexical index sees common
and rare terms as in real text. Deterministic for a seed.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

COMMON = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "for",
    "that",
    "on",
    "with",
    "as",
    "by",
    "be",
    "this",
    "are",
    "from",
    "at",
    "or",
    "it",
    "an",
    "not",
    "which",
    "can",
    "when",
    "each",
    "if",
    "all",
    "will",
    "we",
    "use",
    "one",
    "more",
    "was",
    "has",
    "its",
    "into",
    "than",
    "only",
    "other",
    "new",
    "time",
    "data",
    "file",
    "key",
    "user",
    "server",
    "request",
    "memory",
    "search",
    "index",
    "value",
    "query",
    "database",
    "table",
    "row",
    "column",
    "config",
    "setting",
    "default",
    "deploy",
    "release",
    "build",
    "test",
    "error",
    "log",
    "cache",
    "service",
    "client",
    "worker",
    "process",
    "thread",
    "lock",
    "commit",
    "version",
    "change",
    "document",
    "chunk",
    "vector",
    "model",
    "embedding",
    "token",
    "label",
    "scope",
    "tenant",
    "namespace",
    "session",
    "permission",
    "audit",
    "event",
    "policy",
    "review",
    "proposal",
    "network",
    "port",
    "address",
    "timeout",
    "retry",
    "backoff",
    "limit",
    "rate",
    "metric",
    "health",
    "status",
    "start",
    "stop",
    "restart",
    "backup",
    "restore",
    "migrate",
    "schema",
    "field",
    "message",
    "stream",
    "batch",
    "queue",
    "page",
    "cursor",
    "read",
    "write",
    "delete",
    "update",
    "create",
    "list",
    "get",
    "set",
    "run",
    "should",
    "must",
    "may",
    "after",
    "before",
    "while",
    "during",
    "between",
    "because",
    "however",
    "also",
    "then",
    "every",
    "first",
    "last",
    "next",
    "previous",
    "small",
    "large",
    "fast",
    "slow",
    "safe",
    "open",
    "closed",
    "local",
    "remote",
]
SYLLABLES = [
    "ka",
    "ri",
    "to",
    "ne",
    "mo",
    "sa",
    "lu",
    "vi",
    "de",
    "pa",
    "ho",
    "ze",
    "gu",
    "fi",
    "ra",
    "no",
    "te",
    "si",
    "ma",
    "lo",
    "be",
    "da",
    "ku",
    "re",
]
KINDS = ("markdown", "python", "typescript", "go")
# Share of the tree's bytes by kind: mostly documentation, then code.
SHARES = {"markdown": 0.55, "python": 0.30, "typescript": 0.10, "go": 0.05}
SUFFIX = {"markdown": ".md", "python": ".py", "typescript": ".ts", "go": ".go"}
FOLDERS = {
    "markdown": ("docs", "docs/guides", "docs/adr", "docs/runbooks", "handbook"),
    "python": ("src/core", "src/api", "src/storage", "src/jobs", "tests"),
    "typescript": ("web/src", "web/src/components", "web/src/api"),
    "go": ("agent/cmd", "agent/internal"),
}


@dataclass
class Words:
    """Zipf-like draws from English words and made-up identifiers."""

    rng: random.Random
    vocabulary: list[str] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        made = {
            "".join(self.rng.choice(SYLLABLES) for _ in range(self.rng.randint(2, 4)))
            for _ in range(6000)
        }
        # English words are the common ones, made-up identifiers the long tail.
        common, rare = list(COMMON), sorted(made - set(COMMON))
        self.rng.shuffle(common)
        self.rng.shuffle(rare)
        self.vocabulary = common + rare
        self.weights = list(
            itertools.accumulate(1 / (rank + 1) ** 1.05 for rank in range(len(self.vocabulary)))
        )

    def draw(self, n: int) -> list[str]:
        return self.rng.choices(self.vocabulary, cum_weights=self.weights, k=n)

    def sentence(self, lo: int = 6, hi: int = 22) -> str:
        words = self.draw(self.rng.randint(lo, hi))
        return words[0].capitalize() + " " + " ".join(words[1:]) + "."

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(2, 6)))

    def name(self, parts: int = 2) -> str:
        return "_".join(self.draw(parts))

    def title(self) -> str:
        return " ".join(w.capitalize() for w in self.draw(self.rng.randint(2, 5)))


def markdown(w: Words, size: int) -> str:
    rng = w.rng
    out = [f"# {w.title()}\n\n{w.paragraph()}\n"]
    while sum(map(len, out)) < size:
        out.append(f"\n## {w.title()}\n\n{w.paragraph()}\n")
        for _ in range(rng.randint(0, 3)):
            out.append(f"\n### {w.title()}\n\n{w.paragraph()}\n")
            shape = rng.random()
            if shape < 0.3:
                out.append(
                    "\n" + "".join(f"- {w.sentence(3, 10)}\n" for _ in range(rng.randint(2, 7)))
                )
            elif shape < 0.5:
                body = "\n".join(
                    f"{w.name()} --{w.name(1)} {rng.randint(1, 9999)}"
                    for _ in range(rng.randint(2, 8))
                )
                out.append(f"\n```sh\n{body}\n```\n")
            elif shape < 0.6:
                head = [w.title() for _ in range(3)]
                rows = "".join(
                    f"| {' | '.join(w.name(1) for _ in head)} |\n" for _ in range(rng.randint(2, 8))
                )
                out.append(f"\n| {' | '.join(head)} |\n|{'---|' * len(head)}\n{rows}")
            out.append(f"\n{w.paragraph()}\n")
    return "".join(out)


def python(w: Words, size: int) -> str:
    rng = w.rng
    out = [f'"""{w.sentence()}\n\n{w.paragraph()}\n"""\n\nfrom __future__ import annotations\n\n']
    out += [f"import {w.name(1)}\n" for _ in range(rng.randint(2, 6))]
    out.append(f"\n{w.name().upper()} = {rng.randint(1, 10000)}\n\n")
    while sum(map(len, out)) < size:
        if rng.random() < 0.4:
            out.append(f'\nclass {w.title().replace(" ", "")}:\n    """{w.sentence()}"""\n\n')
            for _ in range(rng.randint(1, 6)):
                out.append(_function(w, "    ", method=True) + "\n")
        else:
            out.append("\n" + _function(w, "", method=False) + "\n")
    return "".join(out)


def _function(w: Words, indent: str, method: bool) -> str:
    rng = w.rng
    args = ", ".join(["self"] * method + [f"{w.name(1)}: int" for _ in range(rng.randint(0, 3))])
    lines = [f"{indent}def {w.name()}({args}) -> int:", f'{indent}    """{w.sentence()}"""']
    for _ in range(rng.randint(3, 18)):
        shape = rng.random()
        if shape < 0.15:
            lines.append(f"{indent}    # {w.sentence(4, 12)}")
        elif shape < 0.3:
            lines.append(f"{indent}    if {w.name(1)} > {rng.randint(0, 99)}:")
            lines.append(f"{indent}        {w.name(1)} = {w.name(1)}({w.name(1)})")
        else:
            lines.append(f"{indent}    {w.name()} = {w.name(1)}.{w.name()}({rng.randint(0, 999)})")
    lines.append(f"{indent}    return {rng.randint(0, 9)}")
    return "\n".join(lines) + "\n"


def braces(w: Words, size: int, go: bool) -> str:
    """TypeScript or Go: functions of statements between braces (cut in line windows)."""
    rng = w.rng
    out = ["package main\n\n" if go else f"import {{ {w.name(1)} }} from './{w.name(1)}';\n\n"]
    while sum(map(len, out)) < size:
        name = w.name().title().replace("_", "")
        head = (
            f"func {name}(n int) int {{" if go else f"export function {name}(n: number): number {{"
        )
        let, end = ("", "") if go else ("const ", ";")
        assign = " :=" if go else " ="
        body = [f"  // {w.sentence(4, 12)}"] + [
            f"  {let}{w.name(1)}{assign} {w.name(1)}.{w.name(1)}(n, {rng.randint(0, 99)}){end}"
            for _ in range(rng.randint(3, 25))
        ]
        out.append("\n".join([head, *body, "  return n" + ("" if go else ";"), "}"]) + "\n\n")
    return "".join(out)


MAKERS: dict[str, Callable[[Words, int], str]] = {
    "markdown": markdown,
    "python": python,
    "typescript": lambda w, n: braces(w, n, go=False),
    "go": lambda w, n: braces(w, n, go=True),
}


@dataclass(frozen=True)
class Tree:
    root: Path
    files: dict[str, int]  # kind -> files
    bytes: dict[str, int]  # kind -> bytes

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())

    @property
    def total_files(self) -> int:
        return sum(self.files.values())


def build_tree(root: Path, total_bytes: int, seed: int = 7) -> Tree:
    """Write files of every kind under ``root`` until they hold ``total_bytes`` in all."""
    rng = random.Random(seed)
    w = Words(rng)
    files = dict.fromkeys(KINDS, 0)
    sizes = dict.fromkeys(KINDS, 0)
    for kind in KINDS:
        goal = int(total_bytes * SHARES[kind])
        while sizes[kind] < goal:
            # Log-normal: median about 8 KB, some files of hundreds of KB (capped at 900 KB).
            want = min(900_000, int(math.exp(rng.gauss(math.log(8000), 1.0))), goal - sizes[kind])
            text = MAKERS[kind](w, max(want, 200))
            folder = root / rng.choice(FOLDERS[kind])
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{w.name()}_{files[kind]}{SUFFIX[kind]}"
            path.write_text(text)
            files[kind] += 1
            sizes[kind] += len(text.encode())
    return Tree(root, files, sizes)
