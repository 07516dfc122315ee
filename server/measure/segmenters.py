"""Character bigrams or a dictionary segmenter for unspaced scripts? The measurement behind
migration 0050's choice.

``python -m brain.server.measure.segmenters`` reads the multilingual set's Chinese,
Japanese, Thai and Korean memories and questions three ways: the shipped pipeline
(``brain_tsv('simple', ...)`` in a private embedded PostgreSQL: bigrams split at function
words), plain character bigrams without that split, and each language's maintained
segmenter from PyPI when it is installed (jieba, janome, pythainlp, kiwipiepy; none is a
dependency: ``pip install jieba janome pythainlp kiwipiepy`` to compare). Segmenter words
pass through the same function-word filter (a word the pipeline reads as nothing is
dropped). Every question is ranked by BM25 (k1 = 1, b = 0, as the lanes) over its
language's eight memories. Printed per language and reading: hit@1 and hit@5 of the
answerable questions, the unanswerable questions that match nothing, and the cost of
reading one memory (mean over the set, repeated). PostgreSQL's own parser ("postgres
default", what ran before) is the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg

from brain.server.measure import multilingual
from brain.server.runtime import embedded
from brain.server.runtime.bootstrap import prepare_embedded

UNSPACED = ("zh", "ja", "th", "ko")
Reader = Callable[[str], list[str]]


def bm25_rank(query: Sequence[str], docs: Sequence[Sequence[str]]) -> list[int]:
    """Indices of the docs holding a query term, best first (BM25, k1 = 1, b = 0)."""
    n = len(docs)
    df = Counter(t for d in docs for t in set(d))
    scores = []
    for i, d in enumerate(docs):
        tf = Counter(d)
        score = sum(
            math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * 2 * tf[t] / (tf[t] + 1)
            for t in set(query)
            if tf[t]
        )
        if score > 0:
            scores.append((-score, i))
    return [i for _, i in sorted(scores)]


def plain_bigrams(text: str) -> list[str]:
    """Overlapping bigrams of every run of letters (no function-word split)."""
    out: list[str] = []
    for run in "".join(c if c.isalnum() else " " for c in text).split():
        out += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
    return out


def segmenters() -> dict[str, tuple[str, Reader]]:
    """language -> (package, words of a text), for the segmenters installed here (imported
    by name: none is a dependency)."""
    found: dict[str, tuple[str, Reader]] = {}

    def load(module: str) -> Any:
        return importlib.import_module(module) if importlib.util.find_spec(module) else None

    if (jieba := load("jieba")) is not None:
        jieba.setLogLevel(60)
        found["zh"] = ("jieba", lambda text: list(jieba.cut(text)))
    if (janome := load("janome.tokenizer")) is not None:
        tokenizer = janome.Tokenizer()
        found["ja"] = ("janome", lambda text: [t.surface for t in tokenizer.tokenize(text)])
    if (thai := load("pythainlp.tokenize")) is not None:
        found["th"] = ("pythainlp", lambda text: list(thai.word_tokenize(text)))
    if (kiwipiepy := load("kiwipiepy")) is not None:
        kiwi = kiwipiepy.Kiwi()
        found["ko"] = ("kiwipiepy", lambda text: [t.form for t in kiwi.tokenize(text)])
    return found


async def run(repeat: int) -> list[str]:
    languages = {lang.code: lang for lang in multilingual.load() if lang.code in UNSPACED}
    root = Path(tempfile.mkdtemp(prefix="brain-segmenters-"))
    pg: embedded.EmbeddedPostgres | None = None
    try:
        root.chmod(0o755)
        pg = embedded.start(root / "pg", delete_on_stop=True)
        await prepare_embedded(pg)
        conn = await asyncpg.connect(pg.owner_dsn)
        try:
            return await _measure(conn, languages, repeat)
        finally:
            await conn.close()
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(root, ignore_errors=True)


async def _measure(
    conn: asyncpg.Connection, languages: dict[str, multilingual.Language], repeat: int
) -> list[str]:
    async def shipped(text: str) -> list[str]:
        words: list[str] = await conn.fetchval(
            "SELECT tsvector_to_array(brain_tsv('simple'::regconfig, $1))", text
        )
        return words

    async def content(words: list[str]) -> list[str]:
        """The words the pipeline reads as something (function words and marks dropped)."""
        kept: list[bool] = await conn.fetchval(
            "SELECT array_agg(length(brain_tsv('simple'::regconfig, w)) > 0 ORDER BY n) "
            "FROM unnest($1::text[]) WITH ORDINALITY u(w, n)",
            words,
        )
        return [w for w, keep in zip(words, kept or [], strict=False) if keep]

    lines = [
        f"{'lang':5}{'reading':22}{'hit@1':>7}{'hit@5':>7}{'silent':>8}{'ms/memory':>11}",
    ]
    installed = segmenters()
    for code, lang in languages.items():
        texts = list(lang.memories) + [q.text for q in lang.questions]
        readings: dict[str, dict[str, list[str]]] = {"bigrams (shipped)": {}, "plain bigrams": {}}
        costs: dict[str, float] = {}
        costs["bigrams (shipped)"] = await _sql_seconds(conn, SHIPPED, lang.memories, repeat)
        costs["postgres default"] = await _sql_seconds(conn, DEFAULT, lang.memories, repeat)
        for text in texts:
            readings["bigrams (shipped)"][text] = await shipped(text)
            readings["plain bigrams"][text] = plain_bigrams(text)
        started = time.perf_counter()
        for _ in range(repeat):
            for text in lang.memories:
                plain_bigrams(text)
        costs["plain bigrams"] = (time.perf_counter() - started) / repeat
        if code in installed:
            package, read = installed[code]
            name = f"{package} words"
            read(lang.memories[0])  # loads its dictionary
            started = time.perf_counter()
            for _ in range(repeat):
                for text in lang.memories:
                    read(text)
            costs[name] = (time.perf_counter() - started) / repeat
            readings[name] = {text: await content(read(text)) for text in texts}
        readings["postgres default"] = {
            text: await conn.fetchval(
                "SELECT tsvector_to_array(to_tsvector('simple'::regconfig, $1))", text
            )
            for text in texts
        }
        for name, words in readings.items():
            docs = [words[m] for m in lang.memories]
            hit1 = hit5 = asked = silent = unanswerable = 0
            for q in lang.questions:
                ranked = bm25_rank(words[q.text], docs)
                if q.answer is None:
                    unanswerable += 1
                    silent += not ranked
                    continue
                asked += 1
                hit1 += bool(ranked) and ranked[0] == q.answer - 1
                hit5 += (q.answer - 1) in ranked[:5]
            ms = 1000 * costs[name] / len(lang.memories)
            lines.append(
                f"{code:5}{name:22}{hit1 / asked:>7.3f}{hit5 / asked:>7.3f}"
                f"{f'{silent}/{unanswerable}':>8}{ms:>11.3f}"
            )
    lines.append(
        "ms/memory: SQL readings are both lexical columns' expressions, timed in one "
        "statement over the memories repeated (server side, no round trips); the others are "
        "the segmenter alone, in Python"
    )
    return lines


SHIPPED = "brain_tsv('english'::regconfig, t), brain_tsv('simple'::regconfig, t)"
DEFAULT = "to_tsvector('english'::regconfig, t), to_tsvector('simple'::regconfig, t)"


async def _sql_seconds(
    conn: asyncpg.Connection, expressions: str, texts: Sequence[str], repeat: int
) -> float:
    """Seconds to compute ``expressions`` once over ``texts``, measured in the server."""
    many = list(texts) * repeat
    plan = await conn.fetchval(
        f"EXPLAIN (ANALYZE, FORMAT JSON) SELECT {expressions} FROM unnest($1::text[]) t", many
    )
    data = json.loads(plan) if isinstance(plan, str) else plan
    return float(data[0]["Execution Time"]) / 1000 / repeat


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m brain.server.measure.segmenters")
    parser.add_argument("--repeat", type=int, default=20, help="times each memory is read")
    args = parser.parse_args(argv)
    print("\n".join(asyncio.run(run(max(args.repeat, 1)))))


if __name__ == "__main__":
    main()
