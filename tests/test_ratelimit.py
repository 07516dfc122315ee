"""The rate limit every worker of one server shares: one bucket per key in a mapped file."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from brain.authz import RateLimiter, SharedRateLimiter


def test_shared_buckets_behave_as_the_in_process_ones(tmp_path: Path) -> None:
    """Same refusals and waits as RateLimiter for the same calls, and keys stay apart."""
    now = [0.0]
    path = tmp_path / "buckets"
    SharedRateLimiter.create(path)
    shared = SharedRateLimiter(path, rate=2.0, burst=2, clock=lambda: now[0])
    local = RateLimiter(rate=2.0, burst=2, clock=lambda: now[0])
    for step in range(12):
        assert shared.acquire("k") == pytest.approx(local.acquire("k")), step
        now[0] += 0.2
    for step, cost in enumerate([2, 1, 3, 2, 5, 1, 2]):  # costs of several tokens, and over
        assert shared.acquire("k", cost) == pytest.approx(local.acquire("k", cost)), step
        now[0] += 0.4
    assert shared.acquire("other") == 0.0  # a key of its own, full
    shared.close()


def test_two_openers_of_the_file_draw_on_one_bucket(tmp_path: Path) -> None:
    """Two workers (two mappings of the file) share a key's burst instead of doubling it."""
    now = [0.0]
    path = tmp_path / "buckets"
    SharedRateLimiter.create(path)
    first = SharedRateLimiter(path, rate=1.0, burst=3, clock=lambda: now[0])
    second = SharedRateLimiter(path, rate=1.0, burst=3, clock=lambda: now[0])
    waits = [first.acquire("k"), second.acquire("k"), first.acquire("k"), second.acquire("k")]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3] == pytest.approx(1.0)  # the fourth call finds the shared bucket empty
    first.close()
    second.close()


def test_a_full_probe_window_takes_over_the_idlest_key(tmp_path: Path) -> None:
    """With every slot taken, a new key gets the slot of the key idle longest, full."""
    now = [0.0]
    path = tmp_path / "buckets"
    SharedRateLimiter.create(path, slots=2)
    limiter = SharedRateLimiter(path, rate=1.0, burst=1, clock=lambda: now[0], slots=2)
    assert limiter.acquire("a") == 0.0
    now[0] += 1
    assert limiter.acquire("b") == 0.0
    now[0] += 0.1
    assert limiter.acquire("b") > 0  # b is busy and empty
    assert limiter.acquire("c") == 0.0  # c took a's slot (idle longest), not b's
    assert limiter.acquire("b") > 0  # b's bucket was kept
    limiter.close()


def _drain(path: str, calls: int, allowed: multiprocessing.Queue[int]) -> None:
    limiter = SharedRateLimiter(Path(path), rate=1e-6, burst=200)
    allowed.put(sum(1 for _ in range(calls) if limiter.acquire("k") == 0.0))


def test_concurrent_processes_never_take_more_than_the_burst(tmp_path: Path) -> None:
    """Four processes racing on one key are granted exactly the burst between them."""
    path = tmp_path / "buckets"
    SharedRateLimiter.create(path)
    context = multiprocessing.get_context("spawn")
    allowed: multiprocessing.Queue[int] = context.Queue()
    procs = [context.Process(target=_drain, args=(str(path), 150, allowed)) for _ in range(4)]
    for proc in procs:
        proc.start()
    counts = [allowed.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(30)
    assert sum(counts) == 200  # 600 calls, one bucket of 200
