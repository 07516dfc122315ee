"""brain-eval: turn-level retrieval quality on the LoCoMo benchmark, through the real API.

Each conversation is loaded into its own bucket with one SaveMemory per turn
(``"<speaker>: <text>"`` plus the image caption; the session date as valid time). Every
question of categories 1-4 that has evidence is then asked with SearchMemories, and a
question scores by how many of its evidence turns come back: recall@k, hit@k and MRR,
plus client-side search latency. No LLM is involved.

Two checks follow in the same buckets. Silence: the adversarial (category 5) questions
and questions about things never said should return nothing; the report gives the share
that did. Lifecycle: a sample of evidence memories is superseded by corrected versions
and others are forgotten; their questions are asked again, and no superseded or forgotten
memory may come back, while the replacements should (the positive control).

With ``--folds`` the retrieval is cross-validated (see `crossval`): the shipped pass
captures every candidate the server fused, the relevance models and their floor are
refitted on all conversations but one and scored on that one; and the hand-weighted
fusion is asked every question once per candidate of a small grid, each conversation
scored with the candidate chosen on the others.

Without ``--target`` a private PostgreSQL and brain-server are started in a temporary
directory and removed afterwards, with one fresh tenant and key per conversation.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import json
import math
import os
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TextIO

import grpc
import numpy as np

from brain.authz import CommandParser, add_version_argument
from brain.server.domain.memories import Memories
from brain.server.domain.retrieval import relevance
from brain.server.domain.retrieval.lanes import FusedHit, RetrievalParams
from brain.server.domain.validation import normalise
from brain.server.measure import crossval, entities, knowledge_eval
from brain.server.measure.private import (
    Bucket,
    PrivateBrain,
    RemoteBrain,
    private_brain,
)
from brain.server.runtime.app import StartupError
from brain.server.runtime.config import (
    add_embedder_arguments,
    add_graph_extract_arguments,
    add_reranker_arguments,
    embedder_settings,
    graph_extract_settings,
    reranker_settings,
)
from brain.server.telemetry import logs
from brain.v1 import common_pb2, memory_pb2, memory_pb2_grpc

KS = (1, 5, 10, 20)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
RPC_TIMEOUT_S = 60.0
_SESSION = re.compile(r"session_(\d+)")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y")
ADVERSARIAL = 5  # LoCoMo's category of questions the conversation does not answer
# Questions about things no LoCoMo conversation mentions, asked in every bucket.
NEVER_SAID = (
    "What is the torque setting for the rear axle bolts on the tractor?",
    "Which firmware version did the router in the basement run?",
    "How many shares of the mining company did the broker sell?",
    "What was the verdict in the parking ticket appeal?",
    "Which vaccine did the veterinarian give the goat?",
    "What is the password for the office wifi?",
    "Who won the regional curling championship?",
    "What dosage of the blood pressure medicine was prescribed?",
)
LIFECYCLE_SAMPLE = 8  # memories superseded, and as many forgotten, per conversation


class DataError(Exception):
    """The file is not in the LoCoMo format; the message says where and what."""


# --- the data ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    dia_id: str
    content: str
    valid_from: datetime
    speaker: str = ""
    text: str = ""


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    adversarial: list[str] = field(default_factory=list)  # category-5 question texts


def load_locomo(path: Path) -> list[Conversation]:
    """Read a LoCoMo-format file; raises `DataError` naming the first problem."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(raw, list) or not raw:
        raise DataError(f"{path}: expected a non-empty JSON list of LoCoMo samples")
    conversations = [_conversation(sample, i) for i, sample in enumerate(raw)]
    if not any(c.questions for c in conversations):
        raise DataError(f"{path}: no question of categories 1-4 has evidence; nothing to ask")
    return conversations


def _conversation(sample: Any, index: int) -> Conversation:
    where = f"sample {index}"
    if not isinstance(sample, dict):
        raise DataError(f"{where}: expected an object with 'conversation' and 'qa'")
    sample_id = str(sample.get("sample_id") or f"sample-{index}")
    where = f"sample {sample_id!r}"
    conv, qa = sample.get("conversation"), sample.get("qa")
    if not isinstance(conv, dict) or not isinstance(qa, list):
        raise DataError(f"{where}: expected 'conversation' (object) and 'qa' (list)")
    turns: list[Turn] = []
    sessions = sorted(
        (int(m.group(1)), key) for key in conv if (m := _SESSION.fullmatch(key)) is not None
    )
    if not sessions:
        raise DataError(f"{where}: the conversation has no session_N lists")
    for _, key in sessions:
        if not isinstance(conv[key], list):
            raise DataError(f"{where} {key}: expected a list of turns")
        if not conv[key]:
            continue  # an empty session needs no date
        when = session_time(conv.get(f"{key}_date_time"), f"{where} {key}_date_time")
        turns.extend(_turn(t, when, f"{where} {key}[{i}]") for i, t in enumerate(conv[key]))
    questions = [q for i, item in enumerate(qa) if (q := _question(item, f"{where} qa[{i}]"))]
    adversarial = [
        item["question"].strip()
        for item in qa
        if isinstance(item, dict)
        and item.get("category") == ADVERSARIAL
        and isinstance(item.get("question"), str)
        and item["question"].strip()
    ]
    return Conversation(sample_id, turns, questions, adversarial)


def session_time(value: Any, where: str) -> datetime:
    """Parse a LoCoMo session date such as ``"1:56 pm on 8 May, 2023"`` (taken as UTC)."""
    if not isinstance(value, str):
        raise DataError(f"{where}: missing; expected a date like '1:56 pm on 8 May, 2023'")
    for fmt in _DATE_FORMATS:
        with contextlib.suppress(ValueError):
            return datetime.strptime(value.strip(), fmt).replace(tzinfo=UTC)
    raise DataError(f"{where}: {value!r} is not a date like '1:56 pm on 8 May, 2023'")


def _turn(item: Any, when: datetime, where: str) -> Turn:
    if not isinstance(item, dict):
        raise DataError(f"{where}: expected an object with speaker, dia_id and text")
    speaker, dia_id, text = item.get("speaker"), item.get("dia_id"), item.get("text")
    if not (isinstance(speaker, str) and isinstance(dia_id, str) and isinstance(text, str)):
        raise DataError(f"{where}: speaker, dia_id and text must all be strings")
    content = f"{speaker}: {text}"
    caption = item.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        content += f" [image: {caption.strip()}]"
    return Turn(dia_id=dia_id.strip(), content=content, valid_from=when, speaker=speaker, text=text)


def _question(item: Any, where: str) -> Question | None:
    """The question if it is asked (categories 1-4, with evidence), else None."""
    if not isinstance(item, dict):
        raise DataError(f"{where}: expected an object with question, evidence and category")
    category, text = item.get("category"), item.get("question")
    if not isinstance(category, int) or isinstance(category, bool):
        raise DataError(f"{where}: 'category' must be an integer")
    if category not in CATEGORIES:
        return None
    if not isinstance(text, str):
        raise DataError(f"{where}: 'question' must be a string")
    evidence = evidence_ids(item.get("evidence"), where)
    if not evidence or not text.strip():
        return None
    return Question(text=text.strip(), category=category, evidence=evidence)


def evidence_ids(value: Any, where: str = "evidence") -> frozenset[str]:
    """Evidence dia_ids; splits malformed entries such as ``"D1:3; D1:4"``."""
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(e, str) for e in value):
        raise DataError(f"{where}: 'evidence' must be a list of dia_id strings")
    return frozenset(p.strip() for e in value for p in re.split(r"[;,]", e) if p.strip())


# --- what the server computed, for fitting ---------------------------------------------


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


# --- the metric -------------------------------------------------------------------------


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


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


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


@dataclass(frozen=True)
class EvalResult:
    overall: Metrics  # with the parameters the server runs with
    per_category: dict[int, Metrics]
    search_ms: list[float]
    turns: int
    conversations: int
    embedder: str
    load_seconds: float
    k: int
    silence: Silence = field(default_factory=Silence)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    cross_validation: CrossValidation | None = None
    # How the server ordered the scored searches: ranking name -> count. A reranker that
    # failed shows up here as RANKING_FUSED_RERANKER_UNAVAILABLE, not as a lower figure.
    rankings: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.overall.as_json())
        out.update(
            search_p50_ms=round(percentile(self.search_ms, 50), 2),
            search_p95_ms=round(percentile(self.search_ms, 95), 2),
            turns=self.turns,
            conversations=self.conversations,
            embedder=self.embedder,
            load_seconds=round(self.load_seconds, 2),
            k=self.k,
            per_category={
                str(c): {"name": CATEGORIES[c], **m.as_json()}
                for c, m in sorted(self.per_category.items())
            },
            silence=self.silence.as_json(),
            lifecycle=self.lifecycle.as_json(),
            rankings=dict(sorted(self.rankings.items())),
        )
        if self.cross_validation is not None:
            out["cross_validated"] = self.cross_validation.as_json()
        return out


def format_table(result: EvalResult) -> str:
    """The report as a plain-text table for a terminal."""
    heads = [f"R@{k}" for k in KS] + [f"H@{k}" for k in KS] + ["MRR"]
    lines = [
        f"LoCoMo retrieval: {result.conversations} conversation(s), {result.turns} turns, "
        f"{result.overall.questions} questions, embedder {result.embedder}, k={result.k}",
        "",
        f"{'category':<16}{'questions':>10}" + "".join(f"{h:>7}" for h in heads),
    ]

    def row(label: str, m: Metrics) -> str:
        values = [*m.recall.values(), *m.hit.values(), m.mrr]
        return f"{label:<16}{m.questions:>10}" + "".join(f"{v:>7.3f}" for v in values)

    for c, m in sorted(result.per_category.items()):
        lines.append(row(f"{c} {CATEGORIES[c]}", m))
    lines.append(row("all", result.overall))
    cv = result.cross_validation
    if cv is not None:
        lines += ["", f"cross-validated (leave one conversation out, {cv.candidates} candidates):"]
        for c, m in sorted(cv.per_category.items()):
            lines.append(row(f"{c} {CATEGORIES[c]}", m))
        lines.append(row("all, held out", cv.overall))
        lines.append(row("all, in sample", cv.in_sample))
        lines += [f"  held out {sample}: chose {chosen}" for sample, chosen in cv.chosen]
        lines.append(f"  in sample: chose {cv.in_sample_candidate}")
        if cv.learned is not None:
            lines += _learned_lines(cv.learned, row)
    silence, life = result.silence, result.lifecycle
    lines += [
        "",
        f"silent (no hit) when it should be: adversarial {silence.adversarial_silent}/"
        f"{silence.adversarial_asked}, never said {silence.never_said_silent}/"
        f"{silence.never_said_asked}",
        f"lifecycle: {life.superseded} superseded, {life.forgotten} forgotten, asked again "
        f"{life.searches} times: {life.leaked} came back (must be 0); replacements found "
        f"{life.replacements_found}/{life.superseded}",
        "hits ordered: "
        + ", ".join(
            f"{name.removeprefix('RANKING_').lower()} {n}"
            for name, n in sorted(result.rankings.items())
        ),
        "",
        f"search latency p50 {percentile(result.search_ms, 50):.1f} ms, "
        f"p95 {percentile(result.search_ms, 95):.1f} ms (client side, one call at a time); "
        f"loading {result.load_seconds:.1f} s",
    ]
    return "\n".join(lines)


def _learned_lines(learned: LearnedFusion, row: Callable[[str, Metrics], str]) -> list[str]:
    def silent(s: Silence) -> str:
        return (
            f"adversarial {s.adversarial_silent}/{s.adversarial_asked}, "
            f"never said {s.never_said_silent}/{s.never_said_asked}"
        )

    lines = ["", "learned fusion (models fitted on the other conversations, no floor):"]
    lines += [row(f"{c} {CATEGORIES[c]}", m) for c, m in sorted(learned.per_category.items())]
    lines += [
        row("all, held out", learned.overall),
        row("all, in sample", learned.in_sample),
        row("with the floor", learned.with_floor),
        f"  floors chosen: {', '.join(f'{s} {f:g}' for s, f in learned.floors)}",
        f"  silent without the floor: {silent(learned.silence_without_floor)}; "
        f"with it: {silent(learned.silence_with_floor)}",
        "  fitted on all conversations (paste into relevance.py):",
        f"  {learned.fitted!r}",
    ]
    return lines


# --- the run ----------------------------------------------------------------------------


class Progress:
    """One status line on a terminal (rewritten in place), or a line per phase otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.live = out.isatty()
        self._last = 0.0

    def update(self, label: str, done: int, total: int) -> None:
        finished = done >= total
        now = time.monotonic()
        if self.live and (finished or now - self._last >= 0.2):
            self._last = now
            self.out.write(f"\r\x1b[K{label}: {done}/{total}" + ("\n" if finished else ""))
            self.out.flush()
        elif not self.live and finished:
            self.out.write(f"{label}: {done}/{total}\n")
            self.out.flush()


@dataclass
class _Tally:
    scores: list[QuestionScore] = field(default_factory=list)  # with the server's parameters
    search_ms: list[float] = field(default_factory=list)
    rankings: Counter[str] = field(default_factory=Counter)
    turns: int = 0
    load_seconds: float = 0.0
    # by_candidate[c][i]: the scores of grid candidate c on conversation i (with --folds)
    by_candidate: list[list[list[QuestionScore]]] = field(default_factory=list)
    silence: Silence = field(default_factory=Silence)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    captured: list[Candidates] = field(default_factory=list)  # with --folds


async def run_locomo(
    conversations: Sequence[Conversation],
    *,
    embedder: str = "none",
    embedder_options: Mapping[str, Any] | None = None,
    target: str | None = None,
    api_key: str | None = None,
    k: int = 20,
    concurrency: int = 8,
    scratch_dir: Path | None = None,
    progress: Progress | None = None,
    folds: bool = False,
    graph: str = "names",
) -> EvalResult:
    """Load every conversation, ask its questions, and score the rankings.

    With ``target`` (and ``api_key``) the running server there is used; otherwise a
    private one is started with ``embedder`` under ``scratch_dir`` and removed afterwards.
    ``folds`` cross-validates the retrieval parameters (private server only). ``graph``
    (`entities.EXTRACTORS`) says which entities `entities.extract` attaches to every turn.
    """
    if folds and target is not None:
        raise ValueError("--folds needs the private server; a --target keeps its parameters")
    if folds and len(conversations) < 2:
        raise ValueError("--folds needs at least two conversations")
    grid = crossval.candidate_grid(semantic=embedder != "none") if folds else []
    tally = _Tally()
    if target is not None:
        if not api_key:
            raise ValueError("a target needs an API key with memories:read,write,forget")
        brain = RemoteBrain(target, api_key)
        await _run_all(brain, conversations, k, concurrency, progress, tally, grid, graph)
        embedder = f"(as configured on {target})"
    else:
        async with private_brain(embedder, scratch_dir, embedder_options) as private:
            await _run_all(private, conversations, k, concurrency, progress, tally, grid, graph)
    return EvalResult(
        overall=summarise(tally.scores),
        per_category=by_category(tally.scores),
        search_ms=tally.search_ms,
        turns=tally.turns,
        conversations=len(conversations),
        embedder=embedder,
        load_seconds=tally.load_seconds,
        k=k,
        silence=tally.silence,
        lifecycle=tally.lifecycle,
        rankings=dict(tally.rankings),
        cross_validation=(
            _cross_validate(tally.by_candidate, grid, conversations, tally.captured, k)
            if grid
            else None
        ),
    )


def _cross_validate(
    scores: list[list[list[QuestionScore]]],
    grid: Sequence[RetrievalParams],
    conversations: Sequence[Conversation],
    captured: Sequence[Candidates] = (),
    k: int = 20,
) -> CrossValidation:
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


async def _run_all(
    brain: RemoteBrain | PrivateBrain,
    conversations: Sequence[Conversation],
    k: int,
    concurrency: int,
    progress: Progress | None,
    tally: _Tally,
    grid: Sequence[RetrievalParams],
    graph: str = "names",
) -> None:
    """Load everything, ask (once per grid candidate), then the silence and lifecycle checks.

    The lifecycle check changes the buckets, so it comes last.
    """
    async with grpc.aio.insecure_channel(brain.address) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        loaded: list[tuple[Bucket, dict[str, set[str]]]] = []
        for n, conv in enumerate(conversations, 1):
            label = f"[{n}/{len(conversations)}] {conv.sample_id}"
            bucket = await brain.bucket(conv.sample_id)
            started = time.perf_counter()
            turns_of = await _load(stub, bucket, conv, concurrency, progress, label, graph)
            tally.load_seconds += time.perf_counter() - started
            tally.turns += len(conv.turns)
            loaded.append((bucket, turns_of))
        shipped = RetrievalParams()
        # With --folds the shipped pass and the silence questions are captured: every
        # candidate the server fused, to fit the relevance model fold by fold.
        capture = Capture(brain.memories) if grid and isinstance(brain, PrivateBrain) else None
        for c, params in enumerate(grid or [shipped]):
            if grid:
                brain.use(params)
            watching = capture if c == 0 else None
            if watching is not None:
                watching.start()
            per_conv = []
            for n, (conv, (bucket, turns_of)) in enumerate(
                zip(conversations, loaded, strict=True), 1
            ):
                label = f"[{n}/{len(conversations)}] {conv.sample_id}"
                if grid:
                    label += f" candidate {c + 1}/{len(grid)}"
                seen = (tally.search_ms, tally.rankings) if c == 0 else ([], Counter[str]())
                per_conv.append(
                    await _ask(
                        stub, bucket, conv, turns_of, k, progress, label, *seen,
                        capture=watching, conversation=n - 1,
                    )
                )  # fmt: skip
            tally.by_candidate.append(per_conv)
        tally.scores = [s for per_conv in tally.by_candidate[0] for s in per_conv]
        if grid:
            brain.use(shipped)
        for n, (conv, (bucket, turns_of)) in enumerate(zip(conversations, loaded, strict=True)):
            if capture is not None:
                capture.start()
            await _silence(stub, bucket, conv, k, tally.silence, capture, n, turns_of)
            if capture is not None:
                capture.stop()
            await _lifecycle(stub, bucket, conv, turns_of, k, tally.lifecycle)
            if progress is not None:
                progress.update("silence and lifecycle checks", n + 1, len(conversations))
        if capture is not None:
            tally.captured = capture.searches


async def _load(
    stub: memory_pb2_grpc.MemoryServiceAsyncStub,
    bucket: Bucket,
    conv: Conversation,
    concurrency: int,
    progress: Progress | None,
    label: str,
    graph: str = "names",
) -> dict[str, set[str]]:
    """Save every turn; returns memory id -> the dia_ids it stands for (dedupe merges).

    Turns with the same value are saved one after another: the server deduplicates an
    identical active memory, and two concurrent saves of one value could both insert.
    """
    turns_of: dict[str, set[str]] = defaultdict(set)
    same_value: dict[str, list[Turn]] = defaultdict(list)
    for turn in conv.turns:
        same_value[normalise(turn.content)].append(turn)
    done = 0

    async def save(turns: list[Turn]) -> None:
        nonlocal done
        for turn in turns:
            draft = common_pb2.MemoryDraft(content=turn.content, metadata={"dia_id": turn.dia_id})
            draft.valid_from.FromDatetime(turn.valid_from)
            asserted = None
            if graph != "off":
                asserted = entities.extract(turn.speaker, turn.text, speakers=graph == "speakers")
            response = await stub.SaveMemory(
                memory_pb2.SaveMemoryRequest(scope=bucket.scope, memory=draft, graph=asserted),
                metadata=bucket.metadata,
                timeout=RPC_TIMEOUT_S,
            )
            turns_of[response.memory.id].add(turn.dia_id)
            done += 1
            if progress is not None:
                progress.update(f"{label} loading turns", done, len(conv.turns))

    await _bounded(concurrency, [functools.partial(save, ts) for ts in same_value.values()])
    return turns_of


async def _ask(
    stub: memory_pb2_grpc.MemoryServiceAsyncStub,
    bucket: Bucket,
    conv: Conversation,
    turns_of: Mapping[str, set[str]],
    k: int,
    progress: Progress | None,
    label: str,
    search_ms: list[float],
    rankings: Counter[str],
    *,
    capture: Capture | None = None,
    conversation: int = 0,
) -> list[QuestionScore]:
    """Ask the questions one at a time, so latency is service time, not queueing."""
    scores = []
    for n, question in enumerate(conv.questions, 1):
        started = time.perf_counter()
        response = await _search(stub, bucket, question.text, k)
        search_ms.append((time.perf_counter() - started) * 1000)
        if capture is not None:
            capture.take(conversation, question.category, question.evidence, turns_of)
        rankings[memory_pb2.Ranking.Name(response.ranking)] += 1
        ranked = [frozenset(turns_of.get(hit.memory.id, ())) for hit in response.hits]
        scores.append(score_question(ranked, question.evidence, question.category))
        if progress is not None:
            progress.update(f"{label} asking questions", n, len(conv.questions))
    return scores


async def _search(
    stub: memory_pb2_grpc.MemoryServiceAsyncStub, bucket: Bucket, query: str, k: int
) -> memory_pb2.SearchMemoriesResponse:
    request = memory_pb2.SearchMemoriesRequest(
        scope=bucket.scope,
        query=query,
        limit=k,
        time=common_pb2.TimeTravel(any_valid_time=True),  # the facts are dated 2023
    )
    response: memory_pb2.SearchMemoriesResponse = await stub.SearchMemories(
        request, metadata=bucket.metadata, timeout=RPC_TIMEOUT_S
    )
    return response


async def _silence(
    stub: memory_pb2_grpc.MemoryServiceAsyncStub,
    bucket: Bucket,
    conv: Conversation,
    k: int,
    silence: Silence,
    capture: Capture | None = None,
    conversation: int = 0,
    turns_of: Mapping[str, set[str]] | None = None,
) -> None:
    """Ask what the conversation does not answer; silent means no hit at all."""
    for text in conv.adversarial:
        silence.adversarial_asked += 1
        silence.adversarial_silent += not (await _search(stub, bucket, text, k)).hits
        if capture is not None:
            capture.take(conversation, ADVERSARIAL, frozenset(), turns_of or {})
    for text in NEVER_SAID:
        silence.never_said_asked += 1
        silence.never_said_silent += not (await _search(stub, bucket, text, k)).hits
        if capture is not None:
            capture.take(conversation, 0, frozenset(), turns_of or {})


async def _lifecycle(
    stub: memory_pb2_grpc.MemoryServiceAsyncStub,
    bucket: Bucket,
    conv: Conversation,
    turns_of: Mapping[str, set[str]],
    k: int,
    lifecycle: Lifecycle,
) -> None:
    """Supersede some evidence memories, forget others, and ask their questions again.

    The sample: questions with one evidence turn stored as a memory of its own, taken in
    order, alternately superseded (by the turn marked corrected) and forgotten. Each is
    asked again, and so is the old memory's text; the replacement should answer the question.
    """
    memory_of = {next(iter(ds)): mid for mid, ds in turns_of.items() if len(ds) == 1}
    turn_of = {t.dia_id: t for t in conv.turns}
    picked: list[tuple[Question, str, Turn]] = []
    for question in conv.questions:
        (dia_id, *more) = sorted(question.evidence)
        mid = memory_of.get(dia_id)
        if more or mid is None or dia_id not in turn_of or any(mid == m for _, m, _ in picked):
            continue
        picked.append((question, mid, turn_of[dia_id]))
        if len(picked) == 2 * LIFECYCLE_SAMPLE:
            break
    replaced: dict[str, str] = {}  # superseded id -> replacement id
    gone: set[str] = set()
    for n, (_, mid, turn) in enumerate(picked):
        if n % 2 == 0:
            draft = common_pb2.MemoryDraft(
                content=f"{turn.content} (corrected)", metadata={"dia_id": turn.dia_id}
            )
            draft.valid_from.FromDatetime(turn.valid_from)
            saved = await stub.SaveMemory(
                memory_pb2.SaveMemoryRequest(scope=bucket.scope, memory=draft, supersedes=[mid]),
                metadata=bucket.metadata,
                timeout=RPC_TIMEOUT_S,
            )
            replaced[mid] = saved.memory.id
        else:
            await stub.ForgetMemory(
                memory_pb2.ForgetMemoryRequest(
                    scope=bucket.scope, id=mid, reason="brain-eval lifecycle check"
                ),
                metadata=bucket.metadata,
                timeout=RPC_TIMEOUT_S,
            )
            gone.add(mid)
    lifecycle.superseded += len(replaced)
    lifecycle.forgotten += len(gone)
    for question, mid, turn in picked:
        # The question, and the old memory's own text: the query most sure to find it.
        found = {hit.memory.id for hit in (await _search(stub, bucket, question.text, k)).hits}
        lifecycle.replacements_found += mid in replaced and replaced[mid] in found
        found |= {hit.memory.id for hit in (await _search(stub, bucket, turn.content, k)).hits}
        lifecycle.searches += 2
        lifecycle.leaked += len(found & (gone | replaced.keys()))


async def _bounded(concurrency: int, jobs: Sequence[Callable[[], Awaitable[None]]]) -> None:
    """Run jobs with at most ``concurrency`` in flight; the first failure stops the rest."""
    queue = iter(jobs)

    async def worker() -> None:
        for job in queue:
            await job()

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(concurrency, len(jobs))):
                group.create_task(worker())
    except BaseExceptionGroup as failures:
        raise failures.exceptions[0] from None


# --- the command line -------------------------------------------------------------------


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="brain-eval", description=__doc__.split("\n\n")[0])
    add_version_argument(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("locomo", help="turn-level recall on a LoCoMo-format file")
    p.add_argument("--data", type=Path, required=True, help="LoCoMo-format JSON file")
    add_embedder_arguments(p)  # the private server's embedder, as brain-server takes it
    server_default = p.get_default("embedder")
    p.set_defaults(embedder=None, server_default_embedder=server_default)  # None: not given
    add_reranker_arguments(p)  # the private server's reranker, if a deployment brings one
    add_graph_extract_arguments(p)  # --graph-lane-weight, as brain-server takes it
    p.add_argument("--json", action="store_true", help="print one JSON object, not a table")
    p.add_argument("--target", help="host:port of a running brain-server to evaluate instead")
    p.add_argument(
        "--api-key",
        default=os.environ.get("BRAIN_API_KEY"),
        help="with --target: a key with memories:read,write,forget [BRAIN_API_KEY]",
    )
    p.add_argument(
        "--limit-conversations", type=_positive, metavar="N", help="only the first N samples"
    )
    p.add_argument("--k", type=_positive, default=20, help="search limit (default 20, max 100)")
    p.add_argument(
        "--concurrency",
        type=_positive,
        metavar="N",
        default=8,
        help="SaveMemory calls in flight while loading (default 8); searches run one at a time",
    )
    p.add_argument(
        "--graph",
        choices=entities.EXTRACTORS,
        default="names",
        help="entities attached to each turn for the graph lane: capitalised names "
        "(default), also the speaker, or none",
    )
    p.add_argument(
        "--folds",
        action="store_true",
        help="cross-validate the learned fusion and its floor (refitted per fold) and the "
        "hand-weighted grid, leaving one conversation out at a time (private server only; "
        "asks every question once per grid candidate)",
    )
    knowledge_eval.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "knowledge":
        logs.configure("warning")
        try:
            found = asyncio.run(knowledge_eval.run(args))
        except (OSError, ValueError, KeyError, StartupError) as exc:
            _fail(str(exc), 2)
        except grpc.aio.AioRpcError as exc:
            _fail(f"a call to the private server failed: {exc.code().name}: {exc.details()}", 1)
        print(
            json.dumps(found.as_json(), indent=2)
            if args.json
            else knowledge_eval.format_table(found)
        )
        return
    if args.target is not None and not args.api_key:
        _fail("--target needs --api-key (or BRAIN_API_KEY): a key with memories:read,write", 2)
    if args.target is not None and args.embedder is not None:
        _fail("--embedder configures the private server; a --target uses its own", 2)
    if args.target is not None and args.folds:
        _fail("--folds needs the private server; a --target keeps its own parameters", 2)
    args.embedder = args.embedder or args.server_default_embedder
    options = embedder_settings(args) | reranker_settings(args) | graph_extract_settings(args)
    if args.k > 100:
        _fail("--k must be at most 100 (the server's page limit)", 2)
    logs.configure("warning")
    try:
        conversations = load_locomo(args.data)[: args.limit_conversations]
        result = asyncio.run(
            run_locomo(
                conversations,
                embedder=str(options.pop("embedder")),
                embedder_options=options,
                target=args.target,
                api_key=args.api_key,
                k=args.k,
                concurrency=args.concurrency,
                progress=Progress(sys.stderr),
                folds=args.folds,
                graph=args.graph,
            )
        )
    except (DataError, StartupError, ValueError) as exc:
        _fail(str(exc), 2)
    except grpc.aio.AioRpcError as exc:
        where = args.target or "the private server"
        hint = ""
        if args.target and exc.code() == grpc.StatusCode.PERMISSION_DENIED:
            hint = " (each conversation goes to a fresh namespace locomo-*; use a key with "
            hint += "memories:read,write,forget that is not confined to a namespace)"
        _fail(f"a call to {where} failed: {exc.code().name}: {exc.details()}{hint}", 1)
    except KeyboardInterrupt:
        _fail("interrupted" + ("" if args.target else "; the private server was removed"), 130)
    print(json.dumps(result.as_json(), indent=2) if args.json else format_table(result))


def _fail(message: str, code: int) -> NoReturn:
    print(f"brain-eval: error: {message}", file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
