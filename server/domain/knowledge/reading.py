"""Reading the best chunks: the query's best cosine to one sentence of each (issue 31).

Match strength alone cannot tell a question no passage answers from one a passage does
when both share rare words with it ("the Sentinel password of the cache Redis" and the
Redis runbook), and the chunk's own cosine reads the whole chunk at once. A passage that
answers usually holds one sentence close to the question; one that only shares its words
holds none. So, with the in-process local embedder, a hybrid search embeds the sentences
of its best `READ_TOP` chunks (the fused order's first) that share a word with the query
(all of a chunk's when none does) and gives each chunk a ``reading``: the highest cosine
between the query's own vector (not the feedback-moved one the semantic lane searched
with) and one of those sentences (at most 4 a chunk, those sharing the most words).
Only sentences sharing a word: a third as many to embed (8 a search rather than 28 on the
knowledge set, reading the top 3) for the same dev figures.

The reading is a feature of the knowledge relevance model
(`relevance.KNOWLEDGE_READING_MODEL`, fitted with it: the chunks further down, unread,
count 0); the order does not use it.

Measured on the dev part of the knowledge set, cross-validated (docs: Knowledge base):
reading the top 2, 3 or 4 silenced the same questions without an answer at the same
hit@5 (the top 1 fewer, the top 5 or 10 for less hit@5), so the top 2, the cheapest;
sentences beat windows of two sentences, sentences under their heading path, the whole
chunk's cosine to the query's own vector and the contextual token vectors' best match per
query word.

Off by default (the server's ``--knowledge-reading``): with the capture made
deterministic, reading silenced 8 of 17 dev questions without an answer against 6 with
equal scores ranked by path, but 5 against 6 (for 0.011 of hit@5) with them ranked the
other way, so its gain is not robust.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import structlog

from brain.server.domain.retrieval.embedders import Embedder, EmbedderError
from brain.server.domain.retrieval.lanes import FusedHit
from brain.server.domain.retrieval.relevance import RelevanceModel, feature_rows

__all__ = [
    "MAX_SENTENCES",
    "READ_SENTENCES",
    "READ_TOP",
    "read",
    "reweigh",
    "sentences",
    "words",
    "worth_reading",
]

_log = structlog.get_logger("brain.knowledge")

# Chunks read per search (the first of the fused order): 2 and 3 gave the same dev
# cross-validated figures (deterministic capture, two runs each); 2 embed 5.7 sentences a
# search on the knowledge set, 3 embed 8.3.
READ_TOP = 2
# Sentences read per chunk at most (so at most 8 a search): on the knowledge set a chunk
# has 3 sharing a word with the query on average, this project's own docs more; the cap
# changed the reading of 20 of 588 chunks read there and no dev figure.
READ_SENTENCES = 4
# Sentences embedded per chunk at most (a chunk is at most one 256-token window, so this
# bounds only a chunk of many one-word lines, such as a list of names).
MAX_SENTENCES = 40
_MIN_CHARS = 3
# A sentence ends at . ! or ? followed by space and an upper-case letter, a backquote, a
# quote or an opening parenthesis (not at "e.g. the" or "v1.2").
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"(])")
_LINE_MARKS = "#|*- "
_WORD = re.compile(r"[a-z0-9]+")
# Question words and the like, which say nothing of what a sentence is about.
_COMMON_WORDS = (
    "what which when where who whom whose why how does do did is are was were the a an of to "
    "in on for and or with by from at as our we you your i it its this that there be can "
    "could should would will my me us"
)
_COMMON = frozenset(_COMMON_WORDS.split())


def sentences(text: str) -> list[str]:
    """The sentences of a chunk: each line (without Markdown heading, list or table
    marks) cut at sentence ends; pieces under 3 characters are dropped. A chunk
    with none reads as its first 500 characters."""
    found: list[str] = []
    for line in text.split("\n"):
        line = line.strip().strip(_LINE_MARKS).strip()
        if not line:
            continue
        found += [s for s in (p.strip() for p in _SENTENCE_END.split(line)) if len(s) >= _MIN_CHARS]
    return found[:MAX_SENTENCES] or [text[:500]]


def words(text: str) -> frozenset[str]:
    """A text's words as `read` compares them: lower case, their first five letters (so
    "rotate" meets "rotation"), common question words left out."""
    return frozenset(w[:5] for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in _COMMON)


def worth_reading(text: str, query: frozenset[str]) -> list[str]:
    """The sentences of a chunk that share a word with the query (`words`), at most
    `READ_SENTENCES`: those sharing the most words, the earlier first; the first ones
    when none does (a chunk the semantic lane found for a reworded question)."""
    every = sentences(text)
    shared = [(len(words(s) & query), i) for i, s in enumerate(every)]
    sharing = sorted((-n, i) for n, i in shared if n)[:READ_SENTENCES]
    if not sharing:
        return every[:READ_SENTENCES]
    return [every[i] for _, i in sorted(sharing, key=lambda x: x[1])]


async def read(
    embedder: Embedder, text: str, query: Sequence[float], hits: Sequence[FusedHit]
) -> None:
    """Set ``reading`` on the first `READ_TOP` hits: the best cosine between ``query``
    (the vector of ``text``) and one of the sentences `worth_reading`, all embedded in one
    batch; raises `EmbedderError` as the embedder does."""
    head = list(hits[:READ_TOP])
    if not head:
        return
    asked = words(text)
    pieces = [worth_reading(str(h.row["content"]), asked) for h in head]
    vectors = np.asarray(await embedder.embed([s for p in pieces for s in p]), dtype=np.float64)
    q = np.asarray(query, dtype=np.float64)
    lengths = np.linalg.norm(vectors, axis=1) * float(np.linalg.norm(q))
    cosines = (vectors @ q) / np.where(lengths > 0, lengths, 1.0)
    start = 0
    for hit, piece in zip(head, pieces, strict=True):
        hit.reading = float(cosines[start : start + len(piece)].max())
        start += len(piece)


async def reweigh(
    embedder: Embedder,
    text: str,
    query: Sequence[float],
    hits: Sequence[FusedHit],
    corpus_size: int,
    unread: RelevanceModel,
    model: RelevanceModel,
) -> RelevanceModel:
    """`read` the first hits, then give every hit its relevance under ``model``; returns
    the model that decides the search's silence: ``model``, or ``unread`` (whose
    relevances fusion gave the hits) when the embedder failed, which never fails the
    search."""
    try:
        await read(embedder, text, query, hits)
    except EmbedderError as exc:
        _log.warning("reading the best chunks failed; unread relevance", error=str(exc))
        return unread
    rows = feature_rows([h.lanes("document_id") for h in hits], corpus_size or len(hits))
    for hit, probability in zip(hits, model.probabilities(rows), strict=True):
        if not hit.vectorless:  # (no cosine of its own: it keeps the lexical relevance)
            hit.relevance = float(probability)
    return model
