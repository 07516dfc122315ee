"""Leave-one-conversation-out cross-validation of retrieval parameters for brain-eval.

A small grid of `RetrievalParams` (the shipped values first) is scored on every
conversation. For each held-out conversation the candidate with the best recall@10 on the
*other* conversations (their questions pooled) is chosen and scored on the held-out one;
the cross-validated figure pools those held-out scores. The in-sample figure picks one
candidate on everything and scores it on the same data, as tuning by hand did.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Protocol

import numpy as np

from brain.server.domain.retrieval import relevance
from brain.server.domain.retrieval.lanes import RetrievalParams
from brain.server.domain.retrieval.relevance import RelevanceModel

# The parameters the grid varies; every other field keeps its shipped value.
_LEXICAL = ((1.0, 0.0), (1.5, 0.0), (1.2, 0.75))  # BM25 (k1, b)
_EXACT = (0.2, 0.0)
_SEMANTIC = (0.4, 0.25, 0.6)
_FEEDBACK = (0.5, 0.0)
_GRAPH = (0.0, 0.3)


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
    Reciprocal-rank fusion with the shipped weights is tried in both, and so is the
    hand-weighted setting with the entity graph lane off and on.

    The shipped parameters order hits by the learned model, fitted on the whole split, so
    they are no fair candidate: the grid proper (``[1:]``) is the hand-weighted family, and
    the learned fusion is cross-validated apart, by refitting per fold (`fit_model`).
    """
    grid = [RetrievalParams()]
    shipped = replace(grid[0], fusion="minmax")
    grid.append(shipped)
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
    for weight in _GRAPH:  # the entity graph lane off and on, whichever is not shipped
        grid.append(replace(shipped, graph_weight=weight))
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


# --- the relevance model: fitted per fold on what the server computed ---------------------

FLOORS = (0.0, *np.round(np.geomspace(0.002, 0.5, 41), 4).tolist())
FLOOR_TOLERANCE = 0.01  # recall@10 a floor may cost on the training conversations
L2 = 1.0


class Searched(Protocol):
    """One search's candidates, in the server's fused order (`locomo.folds.Candidates`)."""

    @property
    def conversation(self) -> int: ...
    @property
    def evidence(self) -> frozenset[str]: ...  # empty: the search should find nothing
    @property
    def features(self) -> np.ndarray: ...
    @property
    def turns(self) -> list[frozenset[str]]: ...


def labels(search: Searched) -> np.ndarray:
    """1 for each candidate that is evidence for the question, else 0."""
    return np.asarray([float(bool(t & search.evidence)) for t in search.turns])


def ranked(search: Searched, model: RelevanceModel, floor: float, *, learned: bool) -> list[int]:
    """Candidate indices best first (by the model's order, or as the server fused them);
    none when no candidate's relevance reaches ``floor`` (as the server answers)."""
    if not search.turns:
        return []
    if float(model.probabilities(search.features).max()) < floor:
        return []
    if learned:
        z = model.order_scores(search.features)
        return sorted(range(len(z)), key=lambda i: (-z[i], i))  # ties keep the fused order
    return list(range(len(search.turns)))


def recall_at(search: Searched, order: Sequence[int], k: int) -> float:
    found = frozenset().union(*(search.turns[i] for i in order[:k])) & search.evidence
    return len(found) / len(search.evidence) if search.evidence else 0.0


def fit_model(
    train: Sequence[Searched],
    *,
    learned: bool = True,
    order_features: Sequence[str] = relevance.ORDER_FEATURES,
    relevance_features: Sequence[str] = relevance.RELEVANCE_FEATURES,
    l2: float = L2,
    tolerance: float = FLOOR_TOLERANCE,
    k: int = 10,
) -> RelevanceModel:
    """Both models fitted on ``train``, and the floor chosen there too.

    The order is fitted on the questions (see `relevance.fit_order`); the relevance on
    every candidate of every search (evidence = 1; all of a should-be-silent search = 0).
    A search answers only when its best hit's relevance reaches the floor; the floor is
    the highest of `FLOORS` whose recall@k on the training questions stays within
    ``tolerance`` of no floor: silence is bought with at most that much recall, never
    tuned on its own.
    """
    searched = [s for s in train if s.turns]
    order = relevance.fit_order(
        [(s.features, labels(s)) for s in searched if s.evidence], features=order_features, l2=l2
    )
    weights, bias = relevance.fit_relevance(
        np.vstack([s.features for s in searched]),
        np.concatenate([labels(s) for s in searched]),
        features=relevance_features,
        l2=l2,
    )
    model = RelevanceModel(order=order, weights=weights, bias=bias, floor=0.0)
    asked = [s for s in train if s.evidence]
    recalls = [recall_at(s, ranked(s, model, 0.0, learned=learned), k) for s in asked]
    best = [float(model.probabilities(s.features).max()) if s.turns else 0.0 for s in asked]
    base = _mean(recalls)
    chosen = 0.0
    for floor in FLOORS:
        kept = _mean(r if b >= floor else 0.0 for r, b in zip(recalls, best, strict=True))
        if kept >= base - tolerance:
            chosen = floor
    return replace(model, floor=chosen)


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0
