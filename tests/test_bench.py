"""The benchmark CLIs still run end to end (tiny sizes; the figures are not checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import asyncpg
import pytest

from brain.server.measure.synthetic import fill, vocabulary
from brain.server.storage import admin

from .conftest import PgCluster, unique


def test_throughput_bench_runs_and_reports_every_level() -> None:
    """`bench throughput` saves and searches over real gRPC and reports each concurrency."""
    # (The first 3 of the 7 calls per level warm the connection up and are not counted.)
    done = subprocess.run(
        [
            sys.executable, "-m", "brain.server.measure.bench", "throughput",
            "--concurrency", "1", "3", "--ops", "7", "--rows", "20", "--json",
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert [r["concurrency"] for r in results] == [1, 3]
    for r in results:
        for kind in ("save", "search"):
            assert r[kind]["ok"] == 4 and r[kind]["errors"] == {}, r
            assert r[kind]["per_s"] > 0
            assert 0 <= r[kind]["db"]["lock_at_commit"] <= 1


def test_brain_bench_runs_end_to_end_at_a_tiny_size() -> None:
    """`brain-bench` measures the echo ceiling, fills the bucket through SQL and reports
    searches and saves (also saves under a memory quota) at each concurrency with their
    ratio to the ceiling."""
    done = subprocess.run(
        [
            sys.executable, "-m", "brain.server.measure.bench", "--rows", "60", "120",
            "--concurrency", "1", "2", "--ops", "6", "--seconds", "5",
            "--embedders", "none", "--workers", "1", "--json",
            "--kinds", "search", "save", "save-under-quota",
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(results["echo"]) == ["1", "2"]
    assert all(e["ok"] > 0 and e["errors"] == {} for e in results["echo"].values())
    runs = results["runs"]
    assert [(r["rows"], r["kind"], r["concurrency"]) for r in runs] == [
        (rows, kind, c)
        for rows in (60, 120)
        for kind in ("search", "save", "save-under-quota")
        for c in (1, 2)
    ]
    for r in runs:
        assert r["ok"] > 0 and r["errors"] == {}, r
        assert r["vs_echo"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0
        # CPU per call of the in-process server, its PostgreSQL and the driver (few calls:
        # clock ticks of 10 ms may round a group to 0).
        assert sorted(r["cpu_ms"]) == ["driver", "postgres", "server"], r
        assert min(r["cpu_ms"].values()) >= 0 and sum(r["cpu_ms"].values()) > 0, r
    assert all(sorted(e["cpu_ms"]) == ["driver", "server"] for e in results["echo"].values())
    # The first fill inserts the whole size; the second only what the saves left missing.
    assert runs[0]["inserted"] == 60
    assert 0 <= runs[-1]["inserted"] <= 60


def test_brain_bench_with_the_local_embedder_rebuilds_and_reports_the_hnsw_index() -> None:
    """With an embedder the fill gives rows vectors, rebuilds the HNSW index and reports its
    build time and size; hybrid and semantic searches and reads by id then run without
    errors."""
    done = subprocess.run(
        [
            sys.executable, "-m", "brain.server.measure.bench", "--rows", "50",
            "--concurrency", "1", "--ops", "5", "--seconds", "5",
            "--kinds", "search", "semantic", "get",
            "--embedders", "local", "--workers", "1", "--embedded-words", "200", "--json",
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    runs = results["runs"]
    assert [r["kind"] for r in runs] == ["search", "semantic", "get"]
    # What embedding one query costs, alone and batched (process CPU time: never 0).
    assert min(results["embedding"]["local"].values()) > 0
    for run in runs:
        assert run["embedder"] == "local" and run["ok"] > 0 and run["errors"] == {}, run
    assert run["inserted"] == 50 and run["hnsw_mb"] > 0 and run["hnsw_build_s"] >= 0
    assert run["build_memory_mb"] == 512  # the floor; a million rows take about 2 GB


def test_the_hnsw_build_memory_holds_the_graph_within_bounds() -> None:
    from brain.server.measure.synthetic import build_memory_mb
    from brain.server.runtime.embedded import machine_memory

    assert build_memory_mb(10_000, 384) == 512
    quarter = machine_memory() // 4 // 2**20
    assert build_memory_mb(1_000_000, 384) == max(512, min(2148, quarter))
    assert build_memory_mb(10**9, 384) == max(512, quarter)  # never past a quarter


async def test_fill_gives_rows_the_mean_of_their_words_vectors(pg_cluster: PgCluster) -> None:
    """The benchmark's rows carry vectors of the server's model (the semantic lane compares
    no other), each the mean of its words' vectors."""
    dsn = pg_cluster.embedded_pg.owner_dsn
    conn = await asyncpg.connect(dsn)
    try:
        tenant = unique("fill")
        await admin.create_tenant(conn, tenant)
        words = [[float(i % 7 == d) for d in range(384)] for i in range(len(vocabulary()))]
        cost = await fill(dsn, tenant, 30, 384, model="local:test", word_vectors=words)
        rows = await conn.fetch(
            """SELECT m.content, m.embedding::text AS v, m.embedding_model FROM memories m
               JOIN tenants t USING (tenant_id) WHERE t.name = $1""",
            tenant,
        )
    finally:
        await conn.close()
    assert cost["inserted"] == 30 and len(rows) == 30
    for row in rows:
        assert row["embedding_model"] == "local:test"
        ids = [int(w[1:]) for w in row["content"].split() if int(w[1:]) < len(words)]
        expected = [sum(words[i][d] for i in ids) / len(ids) for d in range(7)]
        got = [float(x) for x in row["v"].strip("[]").split(",")[:7]]
        assert got == pytest.approx(expected, abs=1e-6)


def test_the_cpu_meter_counts_a_watched_tree_and_only_it() -> None:
    """A child that burns 0.4 s of CPU counts for its parent's tree, not for the parent
    alone (brain-bench's in-process server must not count its driver child)."""
    from brain.server.measure.cpu import CpuMeter, Watched

    meter = CpuMeter({"tree": Watched(os.getpid()), "alone": Watched(os.getpid(), tree=False)})
    meter.start()
    burner = subprocess.Popen(
        [sys.executable, "-c", BURN_CPU], stdout=subprocess.PIPE, text=True
    )  # fmt: skip
    try:
        assert burner.stdout is not None and burner.stdout.readline() == "burnt\n"
        used = meter.stop()
    finally:
        burner.kill()
        burner.wait()
    assert used["tree"] >= 0.35  # clock ticks are 10 ms
    assert used["alone"] < 0.2  # this process only waited on the child's line


BURN_CPU = """
import time
while time.process_time() < 0.4:
    pass
print("burnt", flush=True)
time.sleep(60)
"""


def test_ingest_bench_builds_a_tree_and_times_the_lexical_commit() -> None:
    """`brain-bench ingest` builds a tree of Markdown and code of the asked size, ingests it
    with `brain ingest` over real gRPC, reports KB/s and chunks/s of the commit, and a
    re-ingest of the unchanged tree sends nothing."""
    done = subprocess.run(
        [
            sys.executable, "-m", "brain.server.measure.bench", "ingest", "--mb", "0.3",
            "--embedder", "none", "--workers", "1", "--json",
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    tree, commit = result["tree"], result["commit"]
    assert tree["bytes"] >= 0.3 * 2**20 and set(tree["by_kind_files"]) == {
        "markdown", "python", "typescript", "go",
    }  # fmt: skip
    assert all(n > 0 for n in tree["by_kind_files"].values())
    assert commit["chunks"] > tree["files"] and commit["kb_per_s"] > 0
    assert f"{tree['files']} created" in commit["summary"] and "0 failed" in commit["summary"]
    assert f"{tree['files']} unchanged" in result["reingest"]["summary"]
    assert "embedding" not in result  # no embedder: nothing to wait for


async def test_fill_writes_rare_words_capitalised_as_names(pg_cluster: PgCluster) -> None:
    """``names_from``: words of that rank and rarer are stored capitalised, the rest not."""
    dsn = pg_cluster.embedded_pg.owner_dsn
    conn = await asyncpg.connect(dsn)
    try:
        tenant = unique("fill")
        await admin.create_tenant(conn, tenant)
        await fill(dsn, tenant, 200, 0, names_from=20)
        contents = await conn.fetch(
            "SELECT m.content FROM memories m JOIN tenants t USING (tenant_id) WHERE t.name = $1",
            tenant,
        )
    finally:
        await conn.close()
    words = [w for row in contents for w in row["content"].split()]
    assert any(w.startswith("W") for w in words) and any(w.startswith("w") for w in words)
    assert all((int(w[1:]) >= 20) == w.startswith("W") for w in words)
