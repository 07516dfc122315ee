"""``--folds``: the LoCoMo run cross-validated, leaving one conversation out at a time.

The shipped pass captures every candidate the server fused (`Capture`); the relevance models
and their floor are refitted on all conversations but one and scored on that one
(`LearnedFusion`). The hand-weighted fusion is asked every question once per candidate of a
small grid, each conversation scored with the candidate chosen on the others
(`CrossValidation`). The grid, the choice and the fitting themselves live in `crossval`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from brain.server.domain.memories import Memories
from brain.server.domain.retrieval import relevance
from brain.server.domain.retrieval.lanes import FusedHit, RetrievalParams
from brain.server.measure import crossval
from brain.server.measure.locomo.data import ADVERSARIAL, CATEGORIES, Conversation
from brain.server.measure.locomo.scoring import (
    KS,
    Metrics,
    QuestionScore,
    Silence,
    by_category,
    score_question,
    summarise,
)


@dataclass
class Candidates:
    """Every fused candidate of one search as the server scored it, before floor and limit."""

    conversation: int
    category: int  # 5: adversarial, 0: never said (both should find nothing)
    evidence: frozenset[str]
    lanes: list[relevance.LaneView]  # per candidate, in the server's fused order
    corpus_size: int
    turns: list[frozenset[str]]  # the turns each candidate stands for

    @functools.cached_property
    def features(self) -> np.ndarray:
        return relevance.feature_rows(self.lanes, self.corpus_size)


class Capture:
    """Watches the private server's searches (`Memories.observer`) one at a time."""

    def __init__(self, memories: Memories) -> None:
        self.memories = memories
        self.searches: list[Candidates] = []
        self._seen: list[tuple[list[FusedHit], int]] = []

    def start(self) -> None:
        self.memories.observer = lambda hits, size: self._seen.append((hits, size))

    def stop(self) -> None:
        self.memories.observer = None

    def take(
        self,
        conversation: int,
        category: int,
        evidence: frozenset[str],
        turns_of: Mapping[str, set[str]],
    ) -> None:
        """File the search that just ran under its question."""
        if not self._seen:
            return
        hits, size = self._seen.pop()
        self._seen.clear()
        self.searches.append(
            Candidates(
                conversation=conversation,
                category=category,
                evidence=evidence,
                lanes=[h.lanes() for h in hits],
                corpus_size=size,
                turns=[frozenset(turns_of.get(str(h.row["memory_id"]), ())) for h in hits],
            )
        )


@dataclass(frozen=True)
class LearnedFusion:
    """The relevance models (see `relevance`) fitted leave-one-conversation-out on the
    candidates the shipped pass captured, and scored on the held-out conversation."""

    overall: Metrics  # held out, ordered by the fold's model, no floor
    per_category: dict[int, Metrics]
    in_sample: Metrics  # fitted on every conversation, scored on them
    with_floor: Metrics  # held out, with the floor each fold chose on the others
    silence_without_floor: Silence  # held out
    silence_with_floor: Silence
    floors: list[tuple[str, float]]  # (held-out sample id, floor chosen on the others)
    fitted: relevance.RelevanceModel  # on every conversation: what the server ships

    def as_json(self) -> dict[str, Any]:
        return {
            **self.overall.as_json(),
            "per_category": {
                str(c): {"name": CATEGORIES[c], **m.as_json()}
                for c, m in sorted(self.per_category.items())
            },
            "in_sample": self.in_sample.as_json(),
            "with_floor": self.with_floor.as_json(),
            "silence_without_floor": self.silence_without_floor.as_json(),
            "silence_with_floor": self.silence_with_floor.as_json(),
            "floors": dict(self.floors),
            "fitted": dataclasses.asdict(self.fitted),
        }


@dataclass(frozen=True)
class CrossValidation:
    """Leave-one-conversation-out figures over a grid of retrieval parameters."""

    overall: Metrics
    per_category: dict[int, Metrics]
    chosen: list[tuple[str, str]]  # (held-out sample id, candidate chosen on the others)
    in_sample: Metrics
    in_sample_candidate: str
    candidates: int
    learned: LearnedFusion | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            **self.overall.as_json(),
            "per_category": {
                str(c): {"name": CATEGORIES[c], **m.as_json()}
                for c, m in sorted(self.per_category.items())
            },
            "chosen": {sample: candidate for sample, candidate in self.chosen},
            "in_sample": {**self.in_sample.as_json(), "candidate": self.in_sample_candidate},
            "candidates": self.candidates,
            **({"learned": self.learned.as_json()} if self.learned is not None else {}),
        }


def cross_validate(
    scores: list[list[list[QuestionScore]]],
    grid: Sequence[RetrievalParams],
    conversations: Sequence[Conversation],
    captured: Sequence[Candidates] = (),
    k: int = 20,
) -> CrossValidation:
    """Leave one conversation out: the hand-weighted grid, then the learned fusion if captured."""
    at = KS.index(10)
    scores, grid = scores[1:], grid[1:]  # the hand-weighted family (see candidate_grid)
    folds = crossval.leave_one_out(scores, at)
    held_out = [s for fold in folds for s in scores[fold.chosen][fold.held_out]]
    everything = range(len(conversations))
    best = crossval.best_candidate(scores, everything, at)
    return CrossValidation(
        overall=summarise(held_out),
        per_category=by_category(held_out),
        chosen=[
            (conversations[f.held_out].sample_id, crossval.describe(grid[f.chosen])) for f in folds
        ],
        in_sample=summarise([s for per_conv in scores[best] for s in per_conv]),
        in_sample_candidate=crossval.describe(grid[best]),
        candidates=len(grid),
        learned=_learned_fusion(captured, conversations, k) if captured else None,
    )


def _learned_fusion(
    captured: Sequence[Candidates], conversations: Sequence[Conversation], k: int
) -> LearnedFusion:
    """Fit on all conversations but one, score the held-out one; then fit on all."""
    held_out: list[QuestionScore] = []
    with_floor: list[QuestionScore] = []
    silence, silence_floor = Silence(), Silence()
    floors: list[tuple[str, float]] = []

    def score(searches: Iterable[Candidates], model: relevance.RelevanceModel) -> None:
        for s in searches:
            for floor, scores, quiet in (
                (0.0, held_out, silence),
                (model.floor, with_floor, silence_floor),
            ):
                order = crossval.ranked(s, model, floor, learned=True)[:k]
                if s.evidence:
                    ranked = [s.turns[i] for i in order]
                    scores.append(score_question(ranked, s.evidence, s.category))
                elif s.category == ADVERSARIAL:
                    quiet.adversarial_asked += 1
                    quiet.adversarial_silent += not order
                else:
                    quiet.never_said_asked += 1
                    quiet.never_said_silent += not order

    for i, conv in enumerate(conversations):
        model = crossval.fit_model([s for s in captured if s.conversation != i])
        floors.append((conv.sample_id, model.floor))
        score([s for s in captured if s.conversation == i], model)
    fitted = crossval.fit_model(captured)
    in_sample = [
        score_question(
            [s.turns[i] for i in crossval.ranked(s, fitted, 0.0, learned=True)[:k]],
            s.evidence,
            s.category,
        )
        for s in captured
        if s.evidence
    ]
    return LearnedFusion(
        overall=summarise(held_out),
        per_category=by_category(held_out),
        in_sample=summarise(in_sample),
        with_floor=summarise(with_floor),
        silence_without_floor=silence,
        silence_with_floor=silence_floor,
        floors=floors,
        fitted=fitted,
    )
