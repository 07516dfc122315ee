"""The run through the API: load every conversation, ask its questions, then two checks.

Each conversation is loaded into its own bucket with one SaveMemory per turn, and its
questions are asked one at a time with SearchMemories. Two checks follow in the same
buckets. Silence: the adversarial questions and questions about things never said
(`NEVER_SAID`) should return nothing. Lifecycle: a sample of evidence memories is superseded
by corrected versions and others are forgotten; their questions are asked again, and no
superseded or forgotten memory may come back, while the replacements should.

Without a target a private PostgreSQL and brain-server are started in a temporary directory
and removed afterwards, with one fresh tenant and key per conversation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import grpc

from brain.server.domain.retrieval.lanes import RetrievalParams
from brain.server.domain.validation import normalise
from brain.server.measure import crossval, entities
from brain.server.measure.locomo.data import ADVERSARIAL, Conversation, Question, Turn
from brain.server.measure.locomo.folds import Candidates, Capture, cross_validate
from brain.server.measure.locomo.report import EvalResult
from brain.server.measure.locomo.scoring import (
    Lifecycle,
    QuestionScore,
    Silence,
    by_category,
    score_question,
    summarise,
)
from brain.server.measure.private import (
    Bucket,
    PrivateBrain,
    RemoteBrain,
    private_brain,
)
from brain.v1 import common_pb2, graph_pb2, memory_pb2, memory_pb2_grpc

RPC_TIMEOUT_S = 60.0
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
    graph: str = "speakers",
    learned_only: bool = False,
) -> EvalResult:
    """Load every conversation, ask its questions, and score the rankings.

    With ``target`` (and ``api_key``) the running server there is used; otherwise a
    private one is started with ``embedder`` under ``scratch_dir`` and removed afterwards.
    ``folds`` cross-validates the retrieval parameters (private server only). ``graph``
    (`entities.EXTRACTORS`) says which entities `entities.extract` attaches to every turn.
    ``learned_only`` keeps the grid to the shipped candidates (a refit in a third of the
    time).
    """
    if folds and target is not None:
        raise ValueError("--folds needs the private server; a --target keeps its parameters")
    if folds and len(conversations) < 2:
        raise ValueError("--folds needs at least two conversations")
    grid = crossval.candidate_grid(semantic=embedder != "none") if folds else []
    if learned_only:  # refit the learned models only: no hand-weighted grid to ask
        grid = grid[:2]
    tally = _Tally()
    if target is not None:
        if not api_key:
            raise ValueError("a target needs an API key with memories:read,write,forget")
        brain = RemoteBrain(target, api_key)
        await _run_all(brain, conversations, k, concurrency, progress, tally, grid, graph)
        embedder = f"(as configured on {target})"
    else:
        async with private_brain(embedder, scratch_dir, embedder_options) as private:
            # Every candidate keeps the server's second-round settings (--hop-entities,
            # --hop-vector-weight).
            flags = private.memories.params
            grid = [
                dataclasses.replace(
                    p, hop_entities=flags.hop_entities, hop_vector_weight=flags.hop_vector_weight
                )
                for p in grid
            ]
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
            cross_validate(tally.by_candidate, grid, conversations, tally.captured, k)
            if grid
            else None
        ),
    )


async def _run_all(
    brain: RemoteBrain | PrivateBrain,
    conversations: Sequence[Conversation],
    k: int,
    concurrency: int,
    progress: Progress | None,
    tally: _Tally,
    grid: Sequence[RetrievalParams],
    graph: str = "speakers",
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
        shipped = grid[0] if grid else RetrievalParams()
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
            await _lifecycle(stub, bucket, conv, turns_of, k, tally.lifecycle, graph)
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
    graph: str = "speakers",
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
            response = await stub.SaveMemory(
                memory_pb2.SaveMemoryRequest(
                    scope=bucket.scope, memory=draft, graph=asserted_by(turn, graph)
                ),
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
    graph: str = "speakers",
) -> None:
    """Supersede some evidence memories, forget others, and ask their questions again.

    The sample: questions with one evidence turn stored as a memory of its own, taken in
    order, alternately superseded (by the turn marked corrected, asserting what the turn
    asserted: a supersede retires the old memory's entities) and forgotten. Each is asked
    again, and so is the old memory's text; the replacement should answer the question.
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
                memory_pb2.SaveMemoryRequest(
                    scope=bucket.scope, memory=draft, supersedes=[mid],
                    graph=asserted_by(turn, graph),
                ),
                metadata=bucket.metadata,
                timeout=RPC_TIMEOUT_S,
            )  # fmt: skip
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


def asserted_by(turn: Turn, graph: str) -> graph_pb2.GraphDraft | None:
    """The entities a turn's memory asserts under ``graph`` (`entities.EXTRACTORS`)."""
    if graph == "off":
        return None
    return entities.extract(turn.speaker, turn.text, speakers=graph == "speakers")


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
