"""Leave-one-conversation-out cross-validation of retrieval parameters for brain-eval.

A small grid of `RetrievalParams` (the shipped values first) is scored on every
conversation. For each held-out conversation the candidate with the best recall@10 on the
*other* conversations (their questions pooled) is chosen and scored on the held-out one;
the cross-validated figure pools those held-out scores. The in-sample figure picks one
candidate on everything and scores it on the same data, as tuning by hand did.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Protocol

from brain.server.domain.retrieval.lanes import RetrievalParams

# The parameters the grid varies; every other field keeps its shipped value.
_LEXICAL = ((1.0, 0.0), (1.5, 0.0), (1.2, 0.75))  # BM25 (k1, b)
_EXACT = (0.2, 0.0)
_SEMANTIC = (0.4, 0.25, 0.6)
_FEEDBACK = (0.5, 0.0)


class Scored(Protocol):
    @property
    def recall(self) -> tuple[float, ...]: ...


@dataclass(frozen=True)
class Fold:
    held_out: int  # index of the held-out conversation
    chosen: int  # index of the candidate chosen on the others


def candidate_grid(semantic: bool) -> list[RetrievalParams]:
    """The shipped parameters first, then the variations worth trying.

    Without an embedder only the lexical choices matter. With one, the lane weights and
    feedback are crossed with the shipped lexical settings, and the lexical variations
    are tried with the shipped semantic ones (a full product would triple the run).
    Reciprocal-rank fusion with the shipped weights is tried in both.
    """
    shipped = RetrievalParams()
    grid = [shipped]
    if not semantic:
        for (k1, b), exact in itertools.product(_LEXICAL, _EXACT):
            grid.append(replace(shipped, exact_weight=exact, bm25_k1=k1, bm25_b=b))
    else:
        for exact, weight, feedback in itertools.product(_EXACT, _SEMANTIC, _FEEDBACK):
            grid.append(
                replace(
                    shipped, exact_weight=exact, semantic_weight=weight, feedback_weight=feedback
                )
            )
        for k1, b in _LEXICAL[1:]:
            grid.append(replace(shipped, bm25_k1=k1, bm25_b=b))
    grid.append(replace(shipped, fusion="rrf"))  # rank-based: no score scale to trust
    unique: list[RetrievalParams] = []
    for params in grid:
        if params not in unique:
            unique.append(params)
    return unique


def describe(params: RetrievalParams) -> str:
    """The fields that differ from the shipped values, or ``shipped``."""
    shipped = RetrievalParams()
    changed = [
        f"{f.name}={getattr(params, f.name)}"
        for f in fields(params)
        if getattr(params, f.name) != getattr(shipped, f.name)
    ]
    return " ".join(changed) or "shipped"


def mean_recall(scores: Sequence[Scored], at: int) -> float:
    return sum(s.recall[at] for s in scores) / len(scores) if scores else 0.0


def best_candidate(
    scores: Sequence[Sequence[Sequence[Scored]]], conversations: Sequence[int], at: int
) -> int:
    """The candidate with the best pooled recall over ``conversations``; ties go earlier.

    ``scores[c][i]`` are candidate c's question scores on conversation i; ``at`` indexes
    the cutoff in each score's ``recall``.
    """
    pooled = [[s for i in conversations for s in per_conv[i]] for per_conv in scores]
    values = [mean_recall(p, at) for p in pooled]
    return max(range(len(values)), key=lambda c: (values[c], -c))


def leave_one_out(scores: Sequence[Sequence[Sequence[Scored]]], at: int) -> list[Fold]:
    """One fold per conversation: the candidate chosen on all the others."""
    n = len(scores[0]) if scores else 0
    if n < 2:
        raise ValueError("cross-validation needs at least two conversations")
    return [
        Fold(held_out=i, chosen=best_candidate(scores, [j for j in range(n) if j != i], at))
        for i in range(n)
    ]
