"""An optional reranker that reorders the fused top N: a deployment brings the model.

Any Cohere-style `POST {url}/v1/rerank` endpoint (TEI, vLLM, Jina, Infinity, Cohere):
the request is ``{"model", "query", "documents", "top_n"}`` and the answer a list of
``{"index", "relevance_score"}`` under ``results`` (TEI's native ``[{"index", "score"}]``
is accepted too). Every failure raises `RerankerError`; search then returns the fused
order and says so, exactly as a failing embedder leaves search lexical.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any, Protocol

from brain.server.domain.endpoints import EndpointError, post_json, v1_endpoint

__all__ = ["HttpReranker", "Reranker", "RerankerError", "build_reranker"]


class RerankerError(Exception):
    """The reranker could not score the documents; the message says what to fix."""


class Reranker(Protocol):
    """Scores documents against a query; higher is more relevant. ``top_n`` is how many
    of the fused hits it is given."""

    top_n: int

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]: ...


class HttpReranker:
    """A Cohere-style `/v1/rerank` endpoint; `url` is the server root (`/v1` accepted)."""

    def __init__(
        self,
        *,
        url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 5.0,
        top_n: int = 20,
    ) -> None:
        self.endpoint = v1_endpoint(url, "rerank")
        self.model = model
        self.top_n = top_n
        self._api_key = api_key
        self._timeout = timeout

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """One score per document, in order; raises `RerankerError` on any failure."""
        if not documents:
            return []
        try:
            async with asyncio.timeout(self._timeout):  # the socket timeout is per read
                return await asyncio.to_thread(self._post, query, list(documents))
        except TimeoutError as exc:
            raise RerankerError(
                f"rerank endpoint {self.endpoint} took longer than {self._timeout} s"
            ) from exc

    def _post(self, query: str, documents: list[str]) -> list[float]:
        body = {
            "model": self.model,
            "query": query,
            "documents": documents,
            "top_n": len(documents),
        }
        try:
            payload = post_json(
                self.endpoint, body, what="rerank", api_key=self._api_key, timeout=self._timeout
            )
        except EndpointError as exc:
            raise RerankerError(str(exc)) from exc
        return self._scores(payload, len(documents))

    def _scores(self, payload: Any, count: int) -> list[float]:
        items: Any = payload.get("results") if isinstance(payload, dict) else payload
        scores: list[float | None] = [None] * count
        try:
            for item in items:
                value = item.get("relevance_score", item.get("score"))
                index = item["index"]
                if isinstance(index, bool) or not isinstance(index, int):
                    raise TypeError("index")
                scores[index] = float(value)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise RerankerError(
                f"rerank endpoint {self.endpoint} sent no 'results' list of "
                "{index, relevance_score} for the documents"
            ) from exc
        if any(s is None or not math.isfinite(s) for s in scores):
            raise RerankerError(
                f"rerank endpoint {self.endpoint} scored {sum(s is not None for s in scores)} "
                f"of {count} documents (or sent a non-finite score)"
            )
        return [s for s in scores if s is not None]


def build_reranker(
    url: str | None,
    model: str | None,
    *,
    api_key: str | None = None,
    timeout: float = 5.0,
    top_n: int = 20,
) -> HttpReranker | None:
    """The configured reranker, or None when no URL is set; raises `RerankerError`."""
    if not url:
        return None
    if not model:
        raise RerankerError("a reranker URL needs a model name (--reranker-model)")
    if timeout <= 0 or top_n < 1:
        raise RerankerError("the reranker timeout must be positive and top N at least 1")
    return HttpReranker(url=url, model=model, api_key=api_key, timeout=timeout, top_n=top_n)
