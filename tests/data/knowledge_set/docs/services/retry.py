"""Retrying calls to flaky dependencies with exponential backoff and jitter.

Used by every outbound HTTP client in the services (payment processors, tax
calculation, email). Only errors that are safe to retry are retried: timeouts,
connection resets, and HTTP 429 / 502 / 503 / 504.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({429, 502, 503, 504})


class RetryableError(Exception):
    """Raised by a call that may succeed when tried again."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RetriesExhausted(Exception):
    """Every attempt failed; the last error is chained as the cause."""


@dataclass(frozen=True)
class Backoff:
    """How long to wait between attempts.

    The n-th wait is drawn uniformly between zero and min(cap, base * 2**n): "full
    jitter", which spreads retries from many clients better than a fixed schedule.
    """

    base: float = 0.2
    cap: float = 20.0
    attempts: int = 5

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.cap, self.base * 2**attempt))


def call_with_retries(
    fn: Callable[[], T],
    backoff: Backoff = Backoff(),
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn`` until it succeeds or the attempts run out.

    A ``Retry-After`` given by the server wins over the computed delay, but never
    beyond the cap, so a misbehaving server cannot park a worker for an hour.
    """
    last: RetryableError | None = None
    for attempt in range(backoff.attempts):
        try:
            return fn()
        except RetryableError as exc:
            last = exc
            if attempt == backoff.attempts - 1:
                break
            wait = backoff.delay(attempt)
            if exc.retry_after is not None:
                wait = min(exc.retry_after, backoff.cap)
            sleep(wait)
    raise RetriesExhausted(f"gave up after {backoff.attempts} attempts") from last


def is_retryable_status(status: int) -> bool:
    """Whether an HTTP status may succeed on a later attempt."""
    return status in RETRYABLE_STATUS


class CircuitBreaker:
    """Stops calling a dependency that keeps failing.

    After ``threshold`` consecutive failures the breaker opens and calls fail fast for
    ``cooldown`` seconds; then one trial call is let through (half-open). Its success
    closes the breaker, its failure opens it again.
    """

    def __init__(self, threshold: int = 10, cooldown: float = 30.0) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self.failures = 0
        self.opened_at: float | None = None

    def allow(self, now: float) -> bool:
        if self.opened_at is None:
            return True
        return now - self.opened_at >= self.cooldown

    def record(self, ok: bool, now: float) -> None:
        if ok:
            self.failures = 0
            self.opened_at = None
            return
        self.failures += 1
        if self.failures >= self.threshold:
            self.opened_at = now
