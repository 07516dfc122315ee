"""`brain-eval knowledge`: retrieval quality of the knowledge base, through the real API.

The documents named by a QA file (by default this repository's documentation, README and
deploy docs, ``tests/data/knowledge_qa.json``) are put into one collection of a private server with
PutDocument, chunked by the server as any upload is, and every question is asked with
SearchKnowledge. A question is answered at k when one of its top k chunks contains the
question's evidence phrase (verbatim from the document). The report gives hit@1/3/5/10,
MRR and the chunk count; no LLM is involved.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import grpc

from brain.authz import Confinement
from brain.server.storage import admin
from brain.v1 import common_pb2, knowledge_pb2, knowledge_pb2_grpc

KS = (1, 3, 5, 10)
REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO / "tests" / "data" / "knowledge_qa.json"
COLLECTION = "repo-docs"


@dataclass(frozen=True)
class Question:
    question: str
    document: str
    evidence: str


@dataclass
class KnowledgeResult:
    questions: int
    documents: int
    chunks: int
    hits: dict[int, int]  # k -> questions answered within the top k
    reciprocal_ranks: float
    lanes: dict[str, int]
    search_ms: list[float]
    misses: list[str]

    def as_json(self) -> dict[str, Any]:
        return {
            "questions": self.questions,
            "documents": self.documents,
            "chunks": self.chunks,
            **{f"hit@{k}": round(self.hits[k] / self.questions, 3) for k in KS},
            "mrr": round(self.reciprocal_ranks / self.questions, 3),
            "lanes": self.lanes,
            "search_p50_ms": round(sorted(self.search_ms)[len(self.search_ms) // 2], 1),
            "misses_at_10": self.misses,
        }


def load(path: Path) -> tuple[list[str], list[Question]]:
    data = json.loads(path.read_text())
    questions = [Question(**q) for q in data["questions"]]
    return list(data["documents"]), questions


async def embedded(
    stub: Any, scope: common_pb2.Scope, md: Any,
    wait_seconds: float = 600.0,
) -> None:  # fmt: skip
    """Wait until the server's background filler has embedded every chunk put."""
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        listed = await stub.ListDocuments(
            knowledge_pb2.ListDocumentsRequest(scope=scope, collection=COLLECTION, page_size=100),
            metadata=md,
        )
        if all(d.fully_embedded for d in listed.documents):
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"chunks still without vectors after {wait_seconds:.0f} s")


async def run_knowledge(
    address: str, api_key: str, root: Path, documents: list[str], questions: list[Question],
    semantic: bool = True,
) -> KnowledgeResult:  # fmt: skip
    """Put the documents, wait for their vectors (``semantic``), ask every question, score
    by evidence phrase."""
    md = (("authorization", f"Bearer {api_key}"),)
    scope = common_pb2.Scope(namespace="knowledge-eval")
    async with grpc.aio.insecure_channel(address) as channel:
        stub = knowledge_pb2_grpc.KnowledgeServiceStub(channel)
        chunks = 0
        for name in documents:
            put = await stub.PutDocument(
                knowledge_pb2.PutDocumentRequest(
                    scope=scope,
                    collection=COLLECTION,
                    path=name,
                    content=(root / name).read_text(),
                ),
                metadata=md,
                timeout=300,
            )
            chunks += put.document.chunk_count
        if semantic:
            await embedded(stub, scope, md)
        hits = dict.fromkeys(KS, 0)
        rr = 0.0
        lanes: dict[str, int] = {}
        search_ms: list[float] = []
        misses: list[str] = []
        for q in questions:
            started = time.perf_counter()
            found = await stub.SearchKnowledge(
                knowledge_pb2.SearchKnowledgeRequest(
                    scope=scope, query=q.question, limit=max(KS), collections=[COLLECTION]
                ),
                metadata=md,
                timeout=60,
            )
            search_ms.append((time.perf_counter() - started) * 1000)
            name = knowledge_pb2.KnowledgeLanes.Name(found.lanes)
            lanes[name] = lanes.get(name, 0) + 1
            rank = next((i for i, h in enumerate(found.hits, 1) if q.evidence in h.content), None)
            if rank is None:
                misses.append(q.question)
                continue
            rr += 1 / rank
            for k in KS:
                hits[k] += rank <= k
    return KnowledgeResult(
        len(questions), len(documents), chunks, hits, rr, lanes, search_ms, misses
    )


async def private_key(owner_dsn: str, pepper: bytes) -> str:
    """A fresh tenant and a key that may put and search documents."""
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
                permissions=frozenset({"knowledge:read", "knowledge:write"}),
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
        "  ".join(f"hit@{k} {data[f'hit@{k}']:.3f}" for k in KS)
        + f"  MRR {data['mrr']:.3f}  search p50 {data['search_p50_ms']} ms",
    ]
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
        "--root", type=Path, default=REPO, help="folder the QA file's documents are read from"
    )
    p.add_argument("--embedder", choices=["local", "none"], default="local")
    p.add_argument("--json", action="store_true", help="print one JSON object, not a table")


async def run(args: argparse.Namespace) -> KnowledgeResult:
    from brain.server.measure.private import private_brain

    if args.data == DEFAULT_DATA and not DEFAULT_DATA.exists():
        raise OSError(
            "the default QA file (tests/data/knowledge_qa.json) and its documents come with a "
            "source checkout of shared-brain; pass --data FILE and --root FOLDER"
        )
    documents, questions = load(args.data)
    async with private_brain(args.embedder) as brain:
        key = await private_key(brain.owner_dsn, brain.pepper)
        return await run_knowledge(
            brain.address, key, args.root, documents, questions, args.embedder != "none"
        )
