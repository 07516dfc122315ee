"""A per-key token bucket: in one process, or shared by every worker of one server.

``RateLimiter`` keeps its buckets in a dict. ``SharedRateLimiter`` keeps them in a file
that every worker process of one ``brain-server --workers N`` maps into memory, so a key
gets its rate from the whole server, not N times it: the kernel hands each connection to
one worker, and a client with many connections would otherwise draw on N buckets.
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class Limiter(Protocol):
    """What the interceptor asks of a rate limiter."""

    def acquire(self, key_id: str, cost: float = 1.0) -> float:
        """Take ``cost`` tokens (at most the burst); return 0 when allowed, else the seconds
        until they are there."""
        ...


@dataclass
class _Bucket:
    tokens: float
    updated: float


def _refill(tokens: float, updated: float, now: float, rate: float, burst: float) -> float:
    return min(burst, tokens + max(0.0, now - updated) * rate)


def _take(tokens: float, rate: float, cost: float = 1.0) -> tuple[float, float]:
    """(tokens left, seconds to wait): ``cost`` tokens taken when there are that many."""
    if tokens >= cost:
        return tokens - cost, 0.0
    return tokens, (cost - tokens) / rate


class RateLimiter:
    """Token bucket per key id: ``rate`` requests per second, bursts up to ``burst``."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def acquire(self, key_id: str, cost: float = 1.0) -> float:
        """Take ``cost`` tokens (at most the burst: a call can always pass once the bucket
        is full); return 0 when allowed, else the seconds until they are there."""
        cost = min(max(cost, 1.0), self._burst)
        now = self._clock()
        bucket = self._buckets.get(key_id)
        if bucket is None:
            bucket = self._buckets[key_id] = _Bucket(self._burst, now)
        tokens = _refill(bucket.tokens, bucket.updated, now, self._rate, self._burst)
        bucket.tokens, wait = _take(tokens, self._rate, cost)
        bucket.updated = now
        return wait


# One slot: the key id's digest (all zero: free), tokens, last update (CLOCK_MONOTONIC,
# which every process on the host reads alike).
_SLOT = struct.Struct("<16sdd")
SHARED_SLOTS = 65536  # 2 MiB; keys beyond that reuse the slots of idle keys
_PROBE = 32


class SharedRateLimiter:
    """Token buckets in a memory-mapped file shared by a server's worker processes.

    A key's slot is found by open addressing from a hash of its id. Each acquire takes an
    exclusive ``flock`` on the file for a few microseconds: the read-refill-take-write of a
    bucket is atomic across processes. When a key's probe window is full, the slot of the
    key idle longest is taken over: once idle for ``burst / rate`` seconds a bucket is full
    again, so restarting it loses nothing; only with more busy keys than the window holds
    can a key get a fresh bucket early.
    """

    def __init__(
        self,
        path: Path,
        rate: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        slots: int = SHARED_SLOTS,
    ) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._slots = slots
        size = slots * _SLOT.size
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(self._fd).st_size < size:
                os.ftruncate(self._fd, size)
            self._map = mmap.mmap(self._fd, size)
        except OSError:
            os.close(self._fd)
            raise

    @staticmethod
    def create(path: Path, slots: int = SHARED_SLOTS) -> None:
        """Make an empty bucket file for the workers (the parent calls this before them)."""
        with open(path, "wb") as fh:
            fh.truncate(slots * _SLOT.size)
        os.chmod(path, 0o600)

    def acquire(self, key_id: str, cost: float = 1.0) -> float:
        """Take ``cost`` tokens (at most the burst); return 0 when allowed, else the seconds
        until they are there."""
        cost = min(max(cost, 1.0), self._burst)
        digest = hashlib.blake2b(key_id.encode(), digest_size=16).digest()
        start = int.from_bytes(digest[:8], "little") % self._slots
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            now = self._clock()
            offset, tokens, updated = self._find(digest, start, now)
            refilled = _refill(tokens, updated, now, self._rate, self._burst)
            tokens, wait = _take(refilled, self._rate, cost)
            _SLOT.pack_into(self._map, offset, digest, tokens, now)
            return wait
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _find(self, digest: bytes, start: int, now: float) -> tuple[int, float, float]:
        """(offset, tokens, updated) of the key's slot; a new or reused slot starts full."""
        idlest, idlest_at = -1, float("inf")
        for step in range(min(_PROBE, self._slots)):
            offset = ((start + step) % self._slots) * _SLOT.size
            owner, tokens, updated = _SLOT.unpack_from(self._map, offset)
            if owner == digest:
                return offset, tokens, updated
            if owner == bytes(16):
                return offset, self._burst, now
            if updated < idlest_at:
                idlest, idlest_at = offset, updated
        return idlest, self._burst, now

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)
