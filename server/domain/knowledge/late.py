"""Late interaction: reorder a knowledge search's first chunks by MaxSim (docs: Knowledge base).

The local embedder (all-MiniLM-L6-v2) computes a contextual vector per token before mean
pooling makes the chunk's one vector. ColBERT's MaxSim reads those instead: for each word
of the query (its WordPiece tokens, stop words and punctuation left out), the best cosine
to any token of the chunk, averaged over the query. A chunk that holds the asked-for
detail scores higher than one that is only about the same thing, which one pooled vector
blurs. Zero-shot: the model was not trained for it, and nothing here is fitted.

Only the first `LATE_TOP` (5) chunks of an answered search are reordered, after the floor:
hit@5 and silence are the fused order's, only the order within the first five moves.

The chunks' side is stored (`chunk_form`, at most 8 KB a chunk): the filler keeps it from
the model run that makes the chunk's vector, so a search reads 5 stored forms and the
query's own token vectors, kept from its embedding (`query_form`). The stored form: the
tokens of the chunk's embedding text without stop words, punctuation and repeated
WordPieces, clustered to at most 64 k-means centroids, projected to 128 dimensions by a
fixed orthogonal matrix (``late_projection.npy``, shipped: seeded, not recomputed, so a
NumPy release cannot change it under stored forms), re-normalised and stored as int8.
Measured through the server (``brain-eval knowledge``; docs: Knowledge base) it keeps the
gain of all the token vectors: hit@1 dev 0.766 → 0.830, held out 0.845 → 0.887, validation
set 0.506 → 0.610, nothing else moved, at no search latency one can measure.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = [
    "LATE_TOP",
    "STORED_DIMS",
    "STORED_ROWS",
    "chunk_form",
    "late_scores",
    "maxsim",
    "query_form",
    "query_rows",
    "stored_rows",
]

LATE_TOP = 5  # chunks reordered: within the top 5, so hit@5 and silence stay the fused ones
STORED_ROWS = 64  # k-means centroids kept of a chunk's tokens, at most
STORED_DIMS = 128  # dimensions after the projection
_KMEANS_ROUNDS = 8
_PUNCTUATION = re.compile(r"^[^\w]+$")
# Whole-word WordPiece tokens that say nothing of what is asked.
_STOP_WORDS = (
    "what which when where who whom whose why how does do did is are was were the a an of "
    "to in on for and or with by from at as our we you your i it its this that there be can "
    "could should would will my me us has have had if so not any some about into than then "
    "they them their he she his her him been being am"
)
STOP_WORDS = frozenset(_STOP_WORDS.split())

Matrix = npt.NDArray[np.float32]


def query_rows(tokens: Sequence[str]) -> list[int]:
    """The tokens MaxSim reads: no punctuation, no stop words (all of them when nothing
    else is left). The query's rows, and the chunk's before repeats are dropped."""
    keep = [i for i, t in enumerate(tokens) if not _PUNCTUATION.match(t) and t not in STOP_WORDS]
    return keep or list(range(len(tokens)))


def maxsim(query: Matrix, passage: Matrix) -> float:
    """Mean over the query's rows of the best cosine to a passage row (rows unit length)."""
    if not len(query) or not len(passage):
        return 0.0
    return float((query @ passage.T).max(axis=1).mean())


@functools.cache
def _projection() -> Matrix:
    """The 128 by 384 orthogonal projection (rows orthonormal), shipped with the package."""
    matrix: Matrix = np.load(Path(__file__).with_name("late_projection.npy"))
    return matrix


def _unit(rows: Matrix) -> Matrix:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    unit: Matrix = (rows / np.clip(norms, 1e-9, None)).astype(np.float32)
    return unit


def _projected(rows: Matrix) -> Matrix:
    return _unit(rows @ _projection().T)


def query_form(vectors: Matrix, tokens: Sequence[str]) -> Matrix:
    """A query's rows as MaxSim reads them: its kept tokens, projected, unit length."""
    return _projected(vectors[query_rows(tokens)]) if len(tokens) else vectors[:0, :STORED_DIMS]


def chunk_form(vectors: Matrix, tokens: Sequence[str]) -> bytes:
    """What is stored of a chunk's token vectors (its embedding text's, unit rows): kept
    tokens, each WordPiece once, at most `STORED_ROWS` k-means centroids, projected,
    int8 (row-major, `STORED_DIMS` bytes a row)."""
    seen: set[str] = set()
    keep = []
    for i in query_rows(tokens):
        if tokens[i] not in seen:
            seen.add(tokens[i])
            keep.append(i)
    rows = _centroids(vectors[keep], STORED_ROWS) if keep else vectors[:0]
    if not len(rows):
        return b""
    return bytes(np.round(_projected(rows) * 127).astype(np.int8).tobytes())


def stored_rows(data: bytes) -> Matrix:
    """A stored form read back: unit-length rows (to int8's precision)."""
    codes = np.frombuffer(data, dtype=np.int8).reshape(-1, STORED_DIMS)
    rows: Matrix = codes.astype(np.float32) / np.float32(127)
    return rows


def _centroids(rows: Matrix, n: int) -> Matrix:
    """At most ``n`` rows standing for ``rows``: themselves when few, else spherical
    k-means (cosine) from ``n`` rows drawn with a fixed seed, so a chunk always gets one
    form. (Started from evenly spaced rows, dev hit@1 was 0.809 against 0.830: docs,
    Knowledge base. A NumPy release that drew otherwise would change new forms a little,
    never how they meet queries, which is the shipped projection's part.)"""
    if len(rows) <= n:
        return rows
    centres = rows[np.random.default_rng(0).choice(len(rows), n, replace=False)]
    for _ in range(_KMEANS_ROUNDS):
        nearest = (rows @ centres.T).argmax(axis=1)
        members = np.zeros((len(rows), n), dtype=np.float32)
        members[np.arange(len(rows)), nearest] = 1.0
        sums = members.T @ rows
        empty = members.sum(axis=0) == 0
        sums[empty] = centres[empty]  # a centre nothing chose stays where it was
        centres = _unit(sums)
    kept: Matrix = centres
    return kept


def late_scores(query: Matrix, stored: Sequence[bytes]) -> list[float]:
    """MaxSim of each stored chunk form to the query's form."""
    return [maxsim(query, stored_rows(s)) for s in stored]
