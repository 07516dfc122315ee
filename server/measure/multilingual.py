"""`brain-eval multilingual`: team memories in many languages, through the real API.

Three sets, written for this project: ``--split dev`` (``data/multilingual.json``, eight
languages, tuned on), ``--split held-out`` (``data/multilingual_heldout.json``, the same
eight with other facts and questions plus French, German and Russian; never tuned on) and
``--split validation`` (``data/multilingual_validation.json``, the same eleven, written
later by another hand: harder rewording, and four unanswerable questions per language that
ask about things a memory names; nothing tuned or changed on it). Each holds, per
language, eight team memories in four look-alike pairs (two meetings, two servers, two
people, two deadlines: the same words around different facts), seven reworded questions
that each name their answer, and two (validation: four) questions nothing stored answers.
By default every language's memories go into ONE namespace of a private server (a
mixed-language team, 64 memories);
``--layout per-language`` gives each language its own namespace (8 memories: small
buckets; ``--small-buckets floor-off`` measures the earlier rule, no default floor under
50 rows, against the shipped one, BM25 counting at least 50 rows). Each question is one
SearchMemories call (limit 5, default floor). Reported per language and overall:

- hit@1 / hit@5 (= recall@5: one answer per question) and MRR over answerable questions;
- ``unrelated@1``: answerable questions whose first hit is neither the answer nor its
  look-alike partner (noise ranked as an answer); ``unrelated@5``: the share of returned
  hits (top 5) that are neither;
- ``silent``: the share of unanswerable questions that return nothing, and ``mute``: the
  share of answerable ones that return nothing.

Every miss is printed with what the same search returns with no floor (its first three
hits with relevance and cosine, and where the answer came).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc

from brain.v1 import common_pb2, memory_pb2, memory_pb2_grpc

DATA = Path(__file__).resolve().parent / "data" / "multilingual.json"
HELD_OUT = Path(__file__).resolve().parent / "data" / "multilingual_heldout.json"
VALIDATION = Path(__file__).resolve().parent / "data" / "multilingual_validation.json"
SPLITS = {"dev": DATA, "held-out": HELD_OUT, "validation": VALIDATION}
K = 5


@dataclass(frozen=True)
class Question:
    language: str
    text: str
    answer: int | None  # 1..8, None: nothing stored answers it


@dataclass(frozen=True)
class Language:
    code: str
    memories: tuple[str, ...]
    questions: tuple[Question, ...]


def load(path: Path = DATA) -> list[Language]:
    data = json.loads(path.read_text())
    languages = []
    for code, entry in data["languages"].items():
        memories = tuple(entry["memories"])
        questions = tuple(Question(code, q["question"], q["answer"]) for q in entry["questions"])
        for q in questions:
            if q.answer is not None and not 1 <= q.answer <= len(memories):
                raise ValueError(f"{path}: {code} question {q.text!r} names no memory")
        languages.append(Language(code, memories, questions))
    return languages


def partner(answer: int) -> int:
    """The look-alike of memory ``answer`` (pairs 1-2, 3-4, 5-6, 7-8)."""
    return answer + 1 if answer % 2 else answer - 1


@dataclass
class Tally:
    answerable: int = 0
    hit1: int = 0
    hit5: int = 0
    rr: float = 0.0
    unrelated1: int = 0
    unrelated_slots: int = 0
    returned: int = 0
    mute: int = 0
    unanswerable: int = 0
    silent: int = 0
    misses: list[str] = field(default_factory=list)

    def add(self, q: Question, ranked: Sequence[tuple[str, int]], why: str = "") -> None:
        """``ranked``: (language, memory number) of each returned hit, best first; ``why``:
        what the search found with no floor, printed with a miss."""
        if q.answer is None:
            self.unanswerable += 1
            self.silent += not ranked
            if ranked:
                self.misses.append(f"[{q.language}] answered (should be silent): {q.text}{why}")
            return
        self.answerable += 1
        mine = (q.language, q.answer)
        pair = {mine, (q.language, partner(q.answer))}
        rank = next((i for i, hit in enumerate(ranked, 1) if hit == mine), None)
        self.hit1 += rank == 1
        self.hit5 += rank is not None and rank <= K
        self.rr += 1 / rank if rank else 0.0
        self.unrelated1 += bool(ranked) and ranked[0] not in pair
        self.unrelated_slots += sum(hit not in pair for hit in ranked[:K])
        self.returned += len(ranked[:K])
        self.mute += not ranked
        if rank != 1:
            self.misses.append(f"[{q.language}] rank {rank or '-'}: {q.text}{why}")

    def as_json(self) -> dict[str, Any]:
        a, u = max(self.answerable, 1), max(self.unanswerable, 1)
        return {
            "answerable": self.answerable,
            "hit@1": round(self.hit1 / a, 3),
            "hit@5": round(self.hit5 / a, 3),
            "recall@5": round(self.hit5 / a, 3),
            "mrr": round(self.rr / a, 3),
            "unrelated@1": round(self.unrelated1 / a, 3),
            "unrelated@5": round(self.unrelated_slots / max(self.returned, 1), 3),
            "mute": round(self.mute / a, 3),
            "unanswerable": self.unanswerable,
            "silent": round(self.silent / u, 3),
        }


@dataclass
class MultilingualResult:
    embedder: str
    layout: str
    memories: int
    overall: Tally
    by_language: dict[str, Tally]

    def as_json(self) -> dict[str, Any]:
        return {
            "embedder": self.embedder,
            "layout": self.layout,
            "memories": self.memories,
            **self.overall.as_json(),
            "languages": {code: t.as_json() for code, t in self.by_language.items()},
            "misses": self.overall.misses,
        }


async def evaluate(
    address: str, api_key: str, languages: Sequence[Language], *, layout: str, embedder: str
) -> MultilingualResult:
    """Save every memory, ask every question, tally (see the module docstring)."""
    md = (("authorization", f"Bearer {api_key}"),)

    def scope(code: str) -> common_pb2.Scope:
        return common_pb2.Scope(
            namespace="multilingual" if layout == "mixed" else f"multilingual-{code}"
        )

    async with grpc.aio.insecure_channel(address) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        which: dict[str, tuple[str, int]] = {}
        for lang in languages:
            for n, content in enumerate(lang.memories, 1):
                saved = await stub.SaveMemory(
                    memory_pb2.SaveMemoryRequest(
                        scope=scope(lang.code), memory=common_pb2.MemoryDraft(content=content)
                    ),
                    metadata=md,
                    timeout=60,
                )
                which[saved.memory.id] = (lang.code, n)
        overall = Tally()
        by_language = {lang.code: Tally() for lang in languages}
        for lang in languages:
            for q in lang.questions:
                found = await stub.SearchMemories(
                    memory_pb2.SearchMemoriesRequest(scope=scope(lang.code), query=q.text, limit=K),
                    metadata=md,
                    timeout=60,
                )
                ranked = [which.get(h.memory.id, ("?", 0)) for h in found.hits]
                why = ""
                if ranked[:1] != [(lang.code, q.answer)]:  # a miss: what the floor held back
                    why = await _unfloored(stub, md, scope(lang.code), q, which)
                overall.add(q, ranked, why)
                by_language[lang.code].add(q, ranked, why)
    memories = sum(len(lang.memories) for lang in languages)
    return MultilingualResult(embedder, layout, memories, overall, by_language)


async def _unfloored(
    stub: Any,  # memory_pb2_grpc.MemoryServiceStub on an aio channel
    md: tuple[tuple[str, str], ...],
    scope: common_pb2.Scope,
    q: Question,
    which: dict[str, tuple[str, int]],
) -> str:
    """The question asked again with no floor: its first three hits (language and memory
    number, relevance, cosine similarity) and where the answer came."""
    found = await stub.SearchMemories(
        memory_pb2.SearchMemoriesRequest(scope=scope, query=q.text, limit=20, min_relevance=0.0),
        metadata=md,
        timeout=60,
    )
    shown = []
    answer = ""
    for rank, h in enumerate(found.hits, 1):
        code, n = which.get(h.memory.id, ("?", 0))
        text = f"{code}{n} r={h.relevance:.4f} s={h.semantic_similarity:.2f}"
        if rank <= 3:
            shown.append(text)
        if (code, n) == (q.language, q.answer):
            answer = f"; answer at {rank}: {text}"
    return f"  <- no floor: {', '.join(shown) or 'nothing matched'}{answer}"


def format_table(result: MultilingualResult) -> str:
    data = result.as_json()
    columns = ("hit@1", "hit@5", "mrr", "unrelated@1", "unrelated@5", "mute", "silent")
    lines = [
        f"multilingual: {result.memories} memories, {result.overall.answerable} answerable and "
        f"{result.overall.unanswerable} unanswerable questions; embedder {result.embedder}, "
        f"layout {result.layout}",
        f"{'':8}" + "".join(f"{c:>13}" for c in columns),
    ]
    for code, tally in result.by_language.items():
        row = tally.as_json()
        lines.append(f"{code:8}" + "".join(f"{row[c]:>13.3f}" for c in columns))
    lines.append(f"{'all':8}" + "".join(f"{data[c]:>13.3f}" for c in columns))
    lines += [f"  {m}" for m in result.overall.misses]
    return "\n".join(lines)


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "multilingual", help="hit@k and silence on team memories in many languages"
    )
    p.add_argument(
        "--split",
        choices=sorted(SPLITS),
        default="dev",
        help=f"dev: {DATA.name}, eight languages (tuned on); held-out: {HELD_OUT.name}, "
        "eleven languages, other facts and questions (never tuned on); validation: "
        f"{VALIDATION.name}, eleven languages, four unanswerable questions each (chooses "
        "between rules dev cannot tell apart)",
    )
    p.add_argument("--data", type=Path, default=None, help="another set (overrides --split)")
    p.add_argument(
        "--embedder",
        choices=["local", "multilingual", "none"],
        default="local",
        help="the private server's embedder",
    )
    p.add_argument(
        "--layout",
        choices=["mixed", "per-language"],
        default="mixed",
        help="one namespace for every language (default), or one per language",
    )
    p.add_argument(
        "--small-buckets",
        choices=["prior", "floor-off"],
        default="prior",
        help="prior: BM25 counts at least 50 rows and the floor always applies (shipped); "
        "floor-off: the earlier rule, no default floor under 50 rows",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object, not a table")


async def run(args: argparse.Namespace) -> MultilingualResult:
    from brain.server.measure.private import private_brain

    languages = load(args.data or SPLITS[args.split])
    async with private_brain(args.embedder) as brain:
        if args.small_buckets == "floor-off":
            brain.use(replace(brain.memories.params, prior_rows=0))
        bucket = await brain.bucket("multilingual")
        return await evaluate(
            brain.address, bucket.api_key, languages, layout=args.layout, embedder=args.embedder
        )
