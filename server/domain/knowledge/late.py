"""Late interaction: reorder a knowledge search's first chunks by MaxSim (docs: Knowledge base).

The local embedder (all-MiniLM-L6-v2) computes a contextual vector per token before mean
pooling makes the chunk's one vector. ColBERT's MaxSim reads those instead: for each word
of the query (its WordPiece tokens, stop words and punctuation left out), the best cosine
to any token of the chunk, averaged over the query. A chunk that holds the asked-for
detail scores higher than one that is only about the same thing, which one pooled vector
blurs. Zero-shot: the model was not trained for it, and nothing here is fitted.

Only the first `LATE_TOP` (5) chunks of an answered search are reordered, after the floor:
hit@5 and silence are the fused order's, only the order within the first five moves.
Measured offline on the searches' captured candidates and then through the server
(``brain-eval knowledge --late-rerank on``): hit@1 dev 0.766 → 0.819 (cross-validated),
held out 0.845 → 0.873, validation set 0.506 → 0.636, other figures unchanged.

The chunks' token vectors are computed at query time (about 5 chunk embeddings a search),
so it is off by default (the server's ``--knowledge-late-rerank``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from brain.server.domain.knowledge.measures import embedding_text
from brain.server.domain.retrieval.lanes import FusedHit

__all__ = ["LATE_TOP", "late_scores", "maxsim", "query_rows"]

LATE_TOP = 5  # chunks reordered: within the top 5, so hit@5 and silence stay the fused ones
_PUNCTUATION = re.compile(r"^[^\w]+$")
# Whole-word WordPiece tokens that say nothing of what is asked.
_STOP_WORDS = (
    "what which when where who whom whose why how does do did is are was were the a an of "
    "to in on for and or with by from at as our we you your i it its this that there be can "
    "could should would will my me us has have had if so not any some about into than then "
    "they them their he she his her him been being am"
)
STOP_WORDS = frozenset(_STOP_WORDS.split())


def query_rows(tokens: Sequence[str]) -> list[int]:
    """The query tokens MaxSim averages over: no punctuation, no stop words (all of them
    when nothing else is left)."""
    keep = [i for i, t in enumerate(tokens) if not _PUNCTUATION.match(t) and t not in STOP_WORDS]
    return keep or list(range(len(tokens)))


def maxsim(query: npt.NDArray[np.float32], passage: npt.NDArray[np.float32]) -> float:
    """Mean over the query's rows of the best cosine to a passage row (rows unit length)."""
    if not len(query) or not len(passage):
        return 0.0
    return float((query @ passage.T).max(axis=1).mean())


async def late_scores(embedder: object, query: str, hits: Sequence[FusedHit]) -> list[float]:
    """MaxSim of each hit (its heading path and text, as its vector was made) to the query,
    with ``embedder.token_vectors`` (raises `EmbedderError` as the embedder does)."""
    texts = [embedding_text(h.row["heading_path"] or (), h.row["content"]) for h in hits]
    encoded = await embedder.token_vectors([query, *texts])  # type: ignore[attr-defined]
    (q, tokens), passages = encoded[0], encoded[1:]
    q = q[query_rows(tokens)]
    return [maxsim(q, p) for p, _ in passages]
