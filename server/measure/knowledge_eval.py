"""`brain-eval knowledge`: retrieval quality of the knowledge base, through the real API.

The documents named by a QA file (by default the project's own question set,
``tests/data/knowledge_set/questions.json``: 24 documents of a fictional company, written
for it) are put into one collection of a private server with PutDocument, chunked by the
server as any upload is, and every question is asked with SearchKnowledge, one at a time.

- A question with an evidence phrase is answered at k when one of its top k chunks
  contains the phrase (verbatim from the document): hit@1/3/5/10 and MRR.
- A question whose evidence is null has no answer in any document: it should get no hits
  (the relevance floor); the report gives the share that did (silent).
- Questions carry a ``part`` (``dev``: used for tuning; ``heldout``: about documents no
  tuning looked at); each part is reported on its own.

Each question is also asked of BuildContext (default budget, 1000 tokens): "context" is the
share of answerable questions whose evidence phrase is in the packed text, which the
chunks' neighbours (see `context`) can bring in. Search latency (p50, p95) is measured per
SearchKnowledge call from one caller. No LLM is involved.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import grpc

from brain.authz import Confinement
from brain.server.domain.knowledge.search import ChunkSearch
from brain.server.domain.retrieval.relevance import KNOWLEDGE_READING_MODEL
from brain.server.measure import knowledge_folds
from brain.server.storage import admin
from brain.v1 import common_pb2, knowledge_pb2, knowledge_pb2_grpc, memory_pb2, memory_pb2_grpc

KS = (1, 3, 5, 10)
REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO / "tests" / "data" / "knowledge_set" / "questions.json"
COLLECTION = "knowledge-eval"


@dataclass(frozen=True)
class Question:
    question: str
    document: str | None  # None: no document answers it
    evidence: str | None  # None: the right answer is no hits
    part: str = "all"


@dataclass(frozen=True)
class QaSet:
    root: Path  # the documents' folder
    documents: list[str]
    questions: list[Question]


@dataclass
class Asked:
    """What one search answered: the rank of the evidence (None: not in the hits)."""

    question: Question
    rank: int | None
    hits: int
    below_floor: int
    ms: float
    in_context: bool = False  # the evidence is in BuildContext's text
    context_tokens: int = 0


@dataclass
class PartResult:
    answerable: int = 0
    hits: dict[int, int] = field(default_factory=lambda: dict.fromkeys(KS, 0))
    reciprocal_ranks: float = 0.0
    silenced_answerable: int = 0  # answerable questions that got no hits at all
    unanswerable: int = 0
    silent: int = 0  # unanswerable questions that got no hits
    in_context: int = 0  # answerable questions whose evidence BuildContext packed
    context_tokens: int = 0  # over answerable questions
    misses: list[str] = field(default_factory=list)

    def add(self, a: Asked) -> None:
        if a.question.evidence is None:
            self.unanswerable += 1
            self.silent += a.hits == 0
            return
        self.answerable += 1
        self.silenced_answerable += a.hits == 0
        self.in_context += a.in_context
        self.context_tokens += a.context_tokens
        if a.rank is None:
            self.misses.append(a.question.question)
            return
        self.reciprocal_ranks += 1 / a.rank
        for k in KS:
            self.hits[k] += a.rank <= k

    def as_json(self) -> dict[str, Any]:
        n = max(self.answerable, 1)
        return {
            "answerable": self.answerable,
            **{f"hit@{k}": round(self.hits[k] / n, 3) for k in KS},
            "mrr": round(self.reciprocal_ranks / n, 3),
            "in_context": round(self.in_context / n, 3),
            "context_tokens_mean": round(self.context_tokens / n),
            "silenced_answerable": self.silenced_answerable,
            "unanswerable": self.unanswerable,
            "silent": self.silent,
            "silent_rate": round(self.silent / self.unanswerable, 3) if self.unanswerable else None,
            "misses_at_10": self.misses,
        }


@dataclass
class KnowledgeResult:
    questions: int
    documents: int
    chunks: int
    parts: dict[str, PartResult]
    lanes: dict[str, int]
    search_ms: list[float]

    @property
    def hits(self) -> dict[int, int]:
        """Answered within k over every part."""
        return {k: sum(p.hits[k] for p in self.parts.values()) for k in KS}

    @property
    def misses(self) -> list[str]:
        return [q for p in self.parts.values() for q in p.misses]

    def as_json(self) -> dict[str, Any]:
        everything = PartResult()
        for p in self.parts.values():
            everything.answerable += p.answerable
            everything.reciprocal_ranks += p.reciprocal_ranks
            everything.silenced_answerable += p.silenced_answerable
            everything.unanswerable += p.unanswerable
            everything.silent += p.silent
            everything.in_context += p.in_context
            everything.context_tokens += p.context_tokens
            everything.misses += p.misses
        everything.hits = self.hits
        return {
            "questions": self.questions,
            "documents": self.documents,
            "chunks": self.chunks,
            **{k: v for k, v in everything.as_json().items()},
            "parts": {name: p.as_json() for name, p in sorted(self.parts.items())},
            "lanes": self.lanes,
            "search_p50_ms": percentile(self.search_ms, 0.5),
            "search_p95_ms": percentile(self.search_ms, 0.95),
        }


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile, rounded to 0.1 (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def load(path: Path) -> QaSet:
    """A QA file: ``documents`` (paths under ``root``, a folder relative to the file; the
    repository when absent) and ``questions``."""
    data = json.loads(path.read_text())
    root = (path.parent / data["root"]).resolve() if "root" in data else REPO
    questions = [
        Question(
            question=q["question"],
            document=q.get("document"),
            evidence=q.get("evidence"),
            part=q.get("part", "all"),
        )
        for q in data["questions"]
    ]
    return QaSet(root, list(data["documents"]), questions)


async def embedded(
    stub: Any, scope: common_pb2.Scope, md: Any, wait_seconds: float = 600.0
) -> None:
    """Wait until the server's background filler has embedded every chunk put."""
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        token, waiting = "", False
        while True:
            listed = await stub.ListDocuments(
                knowledge_pb2.ListDocumentsRequest(
                    scope=scope, collection=COLLECTION, page_size=100, page_token=token
                ),
                metadata=md,
            )
            waiting = waiting or not all(d.fully_embedded for d in listed.documents)
            token = listed.next_page_token
            if not token:
                break
        if not waiting:
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"chunks still without vectors after {wait_seconds:.0f} s")


def rank_of(evidence: str | None, hits: Sequence[Any]) -> int | None:
    """1-based rank of the first hit holding the evidence phrase, None when none does."""
    if evidence is None:
        return None
    return next((i for i, h in enumerate(hits, 1) if evidence in h.content), None)


async def put_documents(
    stub: Any, scope: common_pb2.Scope, md: Any, root: Path, documents: Sequence[str]
) -> int:
    """Put every document into the eval collection; the number of chunks stored."""
    chunks = 0
    for name in documents:
        put = await stub.PutDocument(
            knowledge_pb2.PutDocumentRequest(
                scope=scope, collection=COLLECTION, path=name, content=(root / name).read_text()
            ),
            metadata=md,
            timeout=300,
        )
        chunks += put.document.chunk_count
    return chunks


async def ask(
    stub: Any, scope: common_pb2.Scope, md: Any, q: Question, **request: Any
) -> tuple[Asked, Any]:
    """One SearchKnowledge call, timed; ``request`` adds fields to the request."""
    started = time.perf_counter()
    found = await stub.SearchKnowledge(
        knowledge_pb2.SearchKnowledgeRequest(
            scope=scope, query=q.question, limit=max(KS), collections=[COLLECTION], **request
        ),
        metadata=md,
        timeout=60,
    )
    ms = (time.perf_counter() - started) * 1000
    below = int(getattr(found, "below_floor", 0))
    return Asked(q, rank_of(q.evidence, found.hits), len(found.hits), below, ms), found


async def in_context(stub: Any, scope: common_pb2.Scope, md: Any, q: Question) -> tuple[bool, int]:
    """Whether BuildContext (default budget) packs the question's evidence, and its tokens."""
    built = await stub.BuildContext(
        memory_pb2.BuildContextRequest(
            scope=scope, query=q.question, knowledge_collections=[COLLECTION]
        ),
        metadata=md,
        timeout=60,
    )
    return q.evidence is not None and q.evidence in built.context, built.tokens_used


async def run_knowledge(
    address: str, api_key: str, root: Path, documents: list[str], questions: list[Question],
    semantic: bool = True, asked: Callable[[Question], None] | None = None,
    embedded_then: Callable[[], Awaitable[None]] | None = None,
) -> KnowledgeResult:  # fmt: skip
    """Put the documents, wait for their vectors (``semantic``; then ``embedded_then``),
    ask every question, score by evidence phrase; ``asked`` is called after each question
    (brain-eval --folds)."""
    md = (("authorization", f"Bearer {api_key}"),)
    scope = common_pb2.Scope(namespace="knowledge-eval")
    async with grpc.aio.insecure_channel(address) as channel:
        stub = knowledge_pb2_grpc.KnowledgeServiceStub(channel)
        contexts = memory_pb2_grpc.MemoryServiceStub(channel)
        chunks = await put_documents(stub, scope, md, root, documents)
        if semantic:
            await embedded(stub, scope, md)
            if embedded_then is not None:
                await embedded_then()
        parts: dict[str, PartResult] = {}
        lanes: dict[str, int] = {}
        search_ms: list[float] = []
        for q in questions:
            answer, found = await ask(stub, scope, md, q)
            if asked is not None:
                asked(q)
            answer.in_context, answer.context_tokens = await in_context(contexts, scope, md, q)
            search_ms.append(answer.ms)
            name = knowledge_pb2.KnowledgeLanes.Name(found.lanes)
            lanes[name] = lanes.get(name, 0) + 1
            parts.setdefault(q.part, PartResult()).add(answer)
    return KnowledgeResult(len(questions), len(documents), chunks, parts, lanes, search_ms)


async def vectors_withdrawn(owner_dsn: str, filler: Any, share: float) -> int:
    """Stop ``filler`` and take the vectors (and token vectors) from ``share`` of the eval
    collection's chunks, chosen by a hash of path and chunk number (the same ones in every
    run): the state a search meets while the filler is still embedding a bulk ingest.
    Returns how many chunks lost their vectors."""
    if filler is not None:
        await filler.stop()
    conn = await asyncpg.connect(owner_dsn)
    try:
        done = await conn.execute(
            """UPDATE document_chunks SET embedding = NULL, embedding_model = NULL,
                      token_vectors = NULL
               WHERE collection = $1
                 AND (hashtext(path || ':' || chunk_no::text)::bigint + 2147483648)
                     % 1000 < $2""",
            COLLECTION,
            round(share * 1000),
        )
    finally:
        await conn.close()
    return int(done.split()[-1])


async def private_key(owner_dsn: str, pepper: bytes) -> str:
    """A fresh tenant and a key that may put and search documents and build contexts."""
    tenant = f"knowledge-eval-{secrets.token_hex(4)}"
    conn = await asyncpg.connect(owner_dsn)
    try:
        async with conn.transaction():
            await admin.create_tenant(conn, tenant)
            minted = await admin.mint_key(
                conn,
                pepper,
                tenant=tenant,
                principal="brain-eval",
                permissions=frozenset({"knowledge:read", "knowledge:write", "memories:read"}),
                confinement=Confinement(),
                labels=frozenset({"team"}),
                expires_at=None,
                description="brain-eval knowledge",
            )
    finally:
        await conn.close()
    return minted.key


def format_table(result: KnowledgeResult) -> str:
    data = result.as_json()
    lines = [
        f"knowledge QA: {result.questions} questions over {result.documents} documents "
        f"({result.chunks} chunks); lanes {data['lanes']}",
        f"{'part':<10}{'answerable':>11}"
        + "".join(f"{f'hit@{k}':>8}" for k in KS)
        + f"{'MRR':>8}{'context':>9}{'silenced':>10}{'no answer':>11}{'silent':>8}",
    ]
    rows = [*data["parts"].items()]
    if len(rows) > 1:
        rows.append(("all", data))
    for name, part in rows:
        silent = f"{part['silent_rate']:.3f}" if part["silent_rate"] is not None else "-"
        lines.append(
            f"{name:<10}{part['answerable']:>11}"
            + "".join(f"{part[f'hit@{k}']:>8.3f}" for k in KS)
            + f"{part['mrr']:>8.3f}{part['in_context']:>9.3f}{part['silenced_answerable']:>10}"
            + f"{part['unanswerable']:>11}{silent:>8}"
        )
    lines.append(
        f"search latency p50 {data['search_p50_ms']} ms, p95 {data['search_p95_ms']} ms "
        f"({len(result.search_ms)} searches, one caller)"
    )
    lines += [f"  missed at 10: {q}" for q in result.misses]
    return "\n".join(lines)


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "knowledge", help="chunk-level recall of the knowledge base on a QA file over documents"
    )
    p.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help=f"QA file (default {DEFAULT_DATA})"
    )
    p.add_argument(
        "--root",
        type=Path,
        help="folder the QA file's documents are read from (default: the file's own root)",
    )
    p.add_argument("--embedder", choices=["local", "none"], default="local")
    p.add_argument(
        "--folds",
        action="store_true",
        help="also refit the relevance models and floor on the dev part, leaving one "
        "fold of documents out at a time, and score the held-out part with the dev fit",
    )
    p.add_argument(
        "--floor-tolerance",
        type=float,
        default=knowledge_folds.FLOOR_TOLERANCE,
        help="with --folds: the hit@5 the fitted floor may cost on the training folds "
        f"(default {knowledge_folds.FLOOR_TOLERANCE})",
    )
    p.add_argument(
        "--reading",
        choices=["on", "off"],
        default="off",
        help="whether a hybrid search reads its best chunks, as the server's "
        "--knowledge-reading (default off, as the server's; with --folds, on refits the "
        "reading model, off the hybrid model)",
    )
    p.add_argument(
        "--late-rerank",
        choices=["on", "off"],
        default="on",
        help="whether knowledge search reorders its first 5 chunks by late interaction, as "
        "the server's --knowledge-late-rerank (default on, as the server's; --folds "
        "scores the fitted order, before it)",
    )
    p.add_argument(
        "--awaiting-vectors",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="once every chunk is embedded, stop the filler and take the vectors from this "
        "share (0..1) of the chunks (the same ones each run) before asking: search while "
        "the backfill of a bulk ingest is still running (default 0)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object, not a table")


@dataclass
class Evaluated:
    result: KnowledgeResult
    folds: knowledge_folds.FoldReport | None = None
    hybrid: bool = True

    def as_json(self) -> dict[str, Any]:
        data = self.result.as_json()
        if self.folds is not None:
            data["folds"] = self.folds.as_json()
        return data

    def table(self) -> str:
        text = format_table(self.result)
        if self.folds is not None:
            text += "\n" + knowledge_folds.format_report(self.folds, self.hybrid)
        return text


class Capture:
    """Files each search's fused candidates under its question (``ChunkSearch.observer``)."""

    def __init__(self, searching: ChunkSearch, questions: Sequence[Question]) -> None:
        self.searching = searching
        self.seen: list[tuple[list[Any], int]] = []
        self.captured: list[knowledge_folds.ChunkCandidates] = []
        dev = [q for q in questions if q.part == "dev"]
        self.dev_documents = sorted({q.document for q in dev if q.document is not None})
        self.unanswered = [q for q in dev if q.evidence is None]
        searching.observer = lambda hits, size: self.seen.append((hits, size))

    def __call__(self, q: Question) -> None:
        hits, size = self.seen.pop()
        self.seen.clear()
        index = self.unanswered.index(q) if q in self.unanswered else 0
        fold = knowledge_folds.fold_of(q.part, q.document, index, self.dev_documents)
        self.captured.append(knowledge_folds.candidates(hits, size, q.evidence, fold))


async def run(args: argparse.Namespace) -> Evaluated:
    from brain.server.measure.private import private_brain

    if args.data == DEFAULT_DATA and not DEFAULT_DATA.exists():
        raise OSError(
            "the default QA file (tests/data/knowledge_set/questions.json) and its documents "
            "come with a source checkout of shared-brain; pass --data FILE (and --root FOLDER)"
        )
    qa = load(args.data)
    root = args.root or qa.root
    semantic = args.embedder != "none"
    share = float(getattr(args, "awaiting_vectors", 0.0))
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"--awaiting-vectors must be within 0..1, not {share}")
    async with private_brain(args.embedder) as brain:
        key = await private_key(brain.owner_dsn, brain.pepper)
        assert isinstance(brain.memories.knowledge, ChunkSearch)
        reads = getattr(args, "reading", "off") == "on"
        brain.memories.knowledge.reading_models = (
            {"local": KNOWLEDGE_READING_MODEL} if reads else {}
        )
        if getattr(args, "late_rerank", "on") == "off":
            brain.memories.knowledge.late_top = 0
        capture = None
        if args.folds:
            capture = Capture(brain.memories.knowledge, qa.questions)

        async def withdraw() -> None:
            if share:
                taken = await vectors_withdrawn(brain.owner_dsn, brain.filler, share)
                print(f"vectors taken from {taken} chunks (awaiting the filler)", file=sys.stderr)

        result = await run_knowledge(
            brain.address, key, root, qa.documents, qa.questions, semantic, capture, withdraw
        )
    if capture is None:
        return Evaluated(result, hybrid=semantic)
    folds = knowledge_folds.cross_validate(capture.captured, args.floor_tolerance)
    return Evaluated(result, folds, semantic)
