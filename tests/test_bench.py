"""The benchmark CLIs still run end to end (tiny sizes; the figures are not checked)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_throughput_bench_runs_and_reports_every_level() -> None:
    """`bench throughput` saves and searches over real gRPC and reports each concurrency."""
    done = subprocess.run(
        [
            sys.executable, "-m", "brain.server.measure.bench", "throughput",
            "--concurrency", "1", "3", "--ops", "4", "--rows", "20", "--json",
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
