"""The metric: a question scores by how many of its evidence turns come back.

recall@k, hit@k and the reciprocal rank of one ranking (`score_question`), averaged overall
and per category (`summarise`, `by_category`); and the tallies of the two checks that follow
in the same buckets, `Silence` and `Lifecycle`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

KS = (1, 5, 10, 20)


@dataclass(frozen=True)
class QuestionScore:
    category: int
    recall: tuple[float, ...]  # one per KS
    hit: tuple[bool, ...]
    reciprocal_rank: float


def score_question(
    ranked: Sequence[frozenset[str]], evidence: frozenset[str], category: int = 0
) -> QuestionScore:
    """Score one ranking; ``ranked[i]`` is the set of turns the i-th hit stands for.

    A hit can stand for several turns when the server merged identical ones.
    """
    recall, hit = [], []
    for k in KS:
        found = evidence & _union(ranked[:k])
        recall.append(len(found) / len(evidence))
        hit.append(bool(found))
    first = next((i for i, turns in enumerate(ranked, 1) if turns & evidence), None)
    return QuestionScore(
        category=category,
        recall=tuple(recall),
        hit=tuple(hit),
        reciprocal_rank=1.0 / first if first is not None else 0.0,
    )


def _union(groups: Iterable[frozenset[str]]) -> frozenset[str]:
    return frozenset().union(*groups)


@dataclass(frozen=True)
class Metrics:
    questions: int
    recall: dict[int, float]
    hit: dict[int, float]
    mrr: float

    def as_json(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {f"recall@{k}": v for k, v in self.recall.items()}
        out.update({f"hit@{k}": v for k, v in self.hit.items()})
        out.update(mrr=self.mrr, questions=self.questions)
        return out


def summarise(scores: Sequence[QuestionScore]) -> Metrics:
    """Average question scores; an empty list gives zeros."""
    n = len(scores)

    def mean(values: Iterable[float]) -> float:
        return sum(values) / n if n else 0.0

    return Metrics(
        questions=n,
        recall={k: mean(s.recall[i] for s in scores) for i, k in enumerate(KS)},
        hit={k: mean(float(s.hit[i]) for s in scores) for i, k in enumerate(KS)},
        mrr=mean(s.reciprocal_rank for s in scores),
    )


def by_category(scores: Sequence[QuestionScore]) -> dict[int, Metrics]:
    return {
        c: summarise([s for s in scores if s.category == c])
        for c in sorted({s.category for s in scores})
    }


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


@dataclass
class Silence:
    """Questions that should find nothing, and how many found nothing (no hit at all)."""

    adversarial_asked: int = 0
    adversarial_silent: int = 0
    never_said_asked: int = 0
    never_said_silent: int = 0

    def as_json(self) -> dict[str, dict[str, float | int]]:
        return {
            "adversarial": {
                "asked": self.adversarial_asked,
                "silent": self.adversarial_silent,
                "share_silent": _share(self.adversarial_silent, self.adversarial_asked),
            },
            "never_said": {
                "asked": self.never_said_asked,
                "silent": self.never_said_silent,
                "share_silent": _share(self.never_said_silent, self.never_said_asked),
            },
        }


@dataclass
class Lifecycle:
    """Superseded and forgotten memories asked for again: none may come back."""

    superseded: int = 0
    forgotten: int = 0
    searches: int = 0
    leaked: int = 0  # hits that were a superseded or forgotten memory (must be 0)
    replacements_found: int = 0  # superseded memories whose replacement came back

    def as_json(self) -> dict[str, int]:
        return dict(vars(self))
