"""`brain-bench ingest`: how fast a repository becomes searchable, lexically and then by meaning.

``brain-bench ingest [--mb 20] [--embedder local] [--workers 2] [--jobs 8]``

Builds a tree of generated Markdown, Python, TypeScript and Go (``corpus_tree``; at
least 20 MB by default) in a temporary folder, starts a private server on a fresh
embedded PostgreSQL (as brain-eval does; with ``--workers`` above 1 a ``brain-server
--workers N`` on the same database), and runs ``brain ingest`` on the tree as a user
would, in its own process, over real gRPC. Two phases are timed from the first byte:

- **lexical commit**: until ``brain ingest`` exits, every document and chunk committed and
  lexically searchable — KB/s of files and chunks/s, with the CPU the server, PostgreSQL
  and the ingest process used meanwhile (where the time goes);
- **embedding backfill**: until no chunk is pending, the servers' background fillers
  having embedded every chunk — chunks/s and KB/s of chunk text.

Then the unchanged tree is ingested again (hashes compared, nothing sent). Figures depend
on the machine and its load.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

from brain.authz import CommandParser
from brain.server.measure.corpus_tree import build_tree
from brain.server.measure.cpu import CpuMeter, Watched
from brain.server.measure.knowledge_eval import private_key
from brain.server.measure.private import private_brain, worker_server
from brain.server.runtime.cpus import usable_cpus
from brain.server.telemetry import logs

COLLECTION = "bench"
NAMESPACE = "bench-ingest"
CHUNKS_SQL = """SELECT count(*) AS chunks, coalesce(sum(octet_length(content)), 0) AS bytes,
                       count(*) FILTER (WHERE embedding IS NULL) AS pending
                FROM document_chunks WHERE retired_at IS NULL AND content <> ''"""


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


async def _ingest(scratch: Path, address: str, key: str, jobs: int) -> tuple[float, str]:
    """Run ``brain ingest`` on the tree; (seconds, its summary)."""
    env = {
        **os.environ,
        "BRAIN_TARGET": address, "BRAIN_API_KEY": key, "BRAIN_NAMESPACE": NAMESPACE,
    }  # fmt: skip
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "brain.clients.ingest", "ingest", "repo",
        "--collection", COLLECTION, "--jobs", str(jobs),
        cwd=scratch, env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await proc.communicate()
    seconds = time.perf_counter() - started
    said = err.decode(errors="replace").strip()
    if proc.returncode != 0:
        raise RuntimeError(f"brain ingest exited {proc.returncode}: {said[-2000:]}")
    # The summary's first line ("N created, ..."); the lines under it are indented.
    heads = [line for line in said.splitlines() if line and not line.startswith(" ")]
    return seconds, heads[-1] if heads else ""


async def run(
    mb: float, embedder: str, workers: int, jobs: int, seed: int, embed_seconds: float | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="brain-bench-ingest-") as folder:
        scratch = Path(folder)
        began = time.perf_counter()
        tree = build_tree(scratch / "repo", int(mb * 1024 * 1024), seed)
        result: dict[str, Any] = {
            "tree": {
                "bytes": tree.total_bytes, "files": tree.total_files, "by_kind_bytes": tree.bytes,
                "by_kind_files": tree.files, "built_s": round(time.perf_counter() - began, 2),
            },
            "embedder": embedder, "workers": workers, "jobs": jobs, "cores": usable_cpus(),
        }  # fmt: skip
        async with private_brain(embedder) as brain:
            key = await private_key(brain.owner_dsn, brain.pepper)
            async with worker_server(brain, embedder, workers) as (address, server):
                if workers > 1 and brain.filler is not None:
                    await brain.filler.stop()  # the workers' fillers embed, as in production
                groups = {"server": server}
                if brain.database_pid is not None:
                    groups["postgres"] = Watched(brain.database_pid)
                meter = CpuMeter(groups)
                client_before = _children_cpu()
                meter.start()
                started = time.perf_counter()
                commit_s, summary = await _ingest(scratch, address, key, jobs)
                cpu = meter.stop()
                cpu["brain ingest"] = _children_cpu() - client_before
                conn = await asyncpg.connect(brain.owner_dsn)
                try:
                    counts = await conn.fetchrow(CHUNKS_SQL)
                    assert counts is not None
                    result["commit"] = {
                        "seconds": round(commit_s, 2),
                        "kb_per_s": round(tree.total_bytes / 1024 / commit_s, 1),
                        "chunks": counts["chunks"],
                        "chunks_per_s": round(counts["chunks"] / commit_s, 1),
                        "pending_at_end": counts["pending"],
                        "cpu_s": {k: round(v, 1) for k, v in cpu.items()},
                        "summary": summary,
                    }
                    if embedder != "none":
                        result["embedding"] = await _embedding(
                            conn, started, counts["chunks"], counts["bytes"], embed_seconds
                        )
                finally:
                    await conn.close()
                again_s, again = await _ingest(scratch, address, key, jobs)
                result["reingest"] = {"seconds": round(again_s, 2), "summary": again}
    return result


async def _embedding(
    conn: asyncpg.Connection, started: float, chunks: int, nbytes: int, limit: float | None
) -> dict[str, Any]:
    """Wait until no chunk is pending (a progress line on a terminal), or ``limit`` seconds
    after the ingest started; the rates since it started."""
    while True:
        counts = await conn.fetchrow(CHUNKS_SQL)
        assert counts is not None
        elapsed = time.perf_counter() - started
        if counts["pending"] == 0 or (limit is not None and elapsed >= limit):
            break
        if sys.stderr.isatty():
            done = chunks - counts["pending"]
            print(
                f"\rembedding: {done}/{chunks} chunks, {done / elapsed:.0f}/s",
                end="", file=sys.stderr,
            )  # fmt: skip
        await asyncio.sleep(1.0)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    done = chunks - counts["pending"]
    share = done / max(chunks, 1)
    return {
        "seconds": round(elapsed, 1),
        "embedded": done,
        "pending": counts["pending"],
        "chunks_per_s": round(done / elapsed, 1),
        "kb_per_s": round(nbytes * share / 1024 / elapsed, 1),  # chunk text, pro rata
        "chunk_text_bytes": nbytes,
    }


def report(r: dict[str, Any]) -> str:
    tree, commit = r["tree"], r["commit"]
    kinds = ", ".join(
        f"{kind} {tree['by_kind_bytes'][kind] / 2**20:.1f} MB in {tree['by_kind_files'][kind]}"
        for kind in tree["by_kind_bytes"]
    )
    cpu = commit["cpu_s"]
    lines = [
        f"tree: {tree['bytes'] / 2**20:.1f} MB in {tree['files']} files ({kinds}), "
        f"built in {tree['built_s']} s",
        f"server: embedder {r['embedder']}, {r['workers']} worker(s); brain ingest --jobs "
        f"{r['jobs']}; {r['cores']} cores",
        f"lexical commit: {commit['seconds']} s = {commit['kb_per_s']:.0f} KB/s, "
        f"{commit['chunks']} chunks = {commit['chunks_per_s']:.0f} chunks/s "
        f"({commit['pending_at_end']} chunks still without a vector at the end)",
        "  CPU meanwhile: "
        + ", ".join(f"{k} {v} s" for k, v in cpu.items())
        + f" (of {commit['seconds'] * (r['cores'] or 1):.0f} s on {r['cores']} cores)",
        f"  {commit['summary']}",
    ]
    if "embedding" in r:
        e = r["embedding"]
        if e["pending"] == 0:
            head = f"embedding backfill: no chunk pending {e['seconds']} s after the first put"
        else:
            rate = (
                f"at this rate about {e['pending'] / e['chunks_per_s'] / 60:.0f} more minutes"
                if e["chunks_per_s"] > 0
                else "none embedded yet: the fillers give way while puts arrive"
            )
            head = (
                f"embedding backfill: stopped at --embed-seconds, {e['seconds']} s after the "
                f"first put, {e['embedded']} chunks embedded and {e['pending']} pending "
                f"({rate})"
            )
        lines.append(
            f"{head}: {e['chunks_per_s']:.1f} chunks/s, {e['kb_per_s']:.1f} KB/s of chunk text"
        )
    lines.append(f"re-ingest unchanged: {r['reingest']['seconds']} s ({r['reingest']['summary']})")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = CommandParser(prog="brain-bench ingest", description=__doc__)
    parser.add_argument("--mb", type=float, default=20.0, help="size of the tree (default 20)")
    parser.add_argument("--embedder", choices=["local", "none"], default="local")
    parser.add_argument(
        "--workers", type=int, default=usable_cpus(),
        help="server processes (brain-server --workers); 1: the private in-process server",
    )  # fmt: skip
    parser.add_argument("--jobs", type=int, default=8, help="brain ingest --jobs")
    parser.add_argument(
        "--embed-seconds", type=float,
        help="stop waiting for the backfill this long after the first put (default: until "
        "no chunk is pending) and report the rate so far",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.mb <= 0 or args.workers < 1 or not 1 <= args.jobs <= 64:
        parser.error("--mb must be positive, --workers at least 1, --jobs between 1 and 64")
    logs.configure("warning")
    result = asyncio.run(
        run(args.mb, args.embedder, args.workers, args.jobs, args.seed, args.embed_seconds)
    )
    print(json.dumps(result) if args.json else report(result))
