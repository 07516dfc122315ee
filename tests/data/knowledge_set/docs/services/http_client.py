"""The shared outbound HTTP client: timeouts, retries, tracing and a circuit breaker.

Every call to a third party (payment processors, banks' APIs, tax rates, email) goes
through `OutboundClient`, so that timeouts and retries are the same everywhere and an
outage of one dependency cannot exhaust the worker pool.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from services.retry import Backoff, CircuitBreaker, RetryableError, call_with_retries, is_retryable_status


@dataclass(frozen=True)
class Timeouts:
    """Seconds. The connect timeout is short because a dependency that does not accept a
    connection within it is down, not slow."""

    connect: float = 2.0
    read: float = 10.0
    total: float = 30.0


class DependencyUnavailable(Exception):
    """The circuit breaker for this dependency is open: fail fast, do not wait."""


class OutboundClient:
    """One per dependency, created at startup and shared by all requests."""

    def __init__(self, name: str, base_url: str, timeouts: Timeouts = Timeouts()) -> None:
        self.name = name
        self.breaker = CircuitBreaker()
        self.backoff = Backoff()
        self._http = httpx.Client(
            base_url=base_url,
            timeout=httpx.Timeout(timeouts.total, connect=timeouts.connect, read=timeouts.read),
            # Keep connections to the dependency warm; most calls go to a few hosts.
            limits=httpx.Limits(max_connections=50, max_keepalive_connections=20),
            headers={"User-Agent": f"heron-services/{name}"},
        )

    def request(self, method: str, path: str, *, idempotent: bool, **kwargs: Any) -> httpx.Response:
        """Send a request; retried only when ``idempotent`` (or carrying an
        Idempotency-Key), since retrying a non-idempotent POST could charge twice."""
        if not self.breaker.allow(time.monotonic()):
            raise DependencyUnavailable(f"{self.name}: circuit open")

        def attempt() -> httpx.Response:
            try:
                response = self._http.request(method, path, **kwargs)
            except (httpx.ConnectError, httpx.ReadTimeout) as exc:
                self.breaker.record(False, time.monotonic())
                raise RetryableError(str(exc)) from exc
            if is_retryable_status(response.status_code):
                self.breaker.record(False, time.monotonic())
                retry_after = response.headers.get("Retry-After")
                raise RetryableError(
                    f"{self.name} answered {response.status_code}",
                    float(retry_after) if retry_after and retry_after.isdigit() else None,
                )
            self.breaker.record(True, time.monotonic())
            return response

        retryable = idempotent or "Idempotency-Key" in kwargs.get("headers", {})
        if not retryable:
            return attempt()
        return call_with_retries(attempt, self.backoff)

    def close(self) -> None:
        self._http.close()


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    """Headers safe to log: credentials are replaced by their length."""
    secret = {"authorization", "x-api-key", "cookie"}
    return {k: (f"<{len(v)} chars>" if k.lower() in secret else v) for k, v in headers.items()}
