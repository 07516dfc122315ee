"""Optional extraction of entities and relations by an OpenAI-compatible chat endpoint.

When configured (``--graph-extract-url``, ``--graph-extract-model``, key in
``BRAIN_GRAPH_EXTRACT_API_KEY``), a memory saved without a graph is sent, after its save
has committed, to ``POST {url}/v1/chat/completions``; what comes back becomes a *candidate*
that supersedes the memory with the same content and the extracted graph, for a reviewer
to approve or reject. Nothing reaches the graph without review. Without an endpoint
nothing is extracted; a failing, slow or nonsensical endpoint is logged and the save it
followed is unaffected.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Protocol

from brain.server.domain import validation as check
from brain.server.domain.endpoints import EndpointError, post_json, v1_endpoint
from brain.v1 import graph_pb2

__all__ = ["Extractor", "ExtractorError", "HttpExtractor", "build_extractor", "parse_graph"]

PROMPT = (
    "Extract the named entities and the relations between them from the user's note. "
    'Answer with one JSON object only: {"entities": [{"name": str, "type": str, '
    '"aliases": [str]}], "relations": [{"subject": str, "predicate": str, "object": str, '
    '"single_valued": bool}]}. Predicates are lower_snake_case verbs such as lives_in or '
    "works_with; single_valued is true when the subject can have only one object at a time. "
    "An entity's type is one of person, organization, place, project, product, event or "
    "other. "
    "Use only names that occur in the note. If there is nothing, answer "
    '{"entities": [], "relations": []}.'
)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)
MAX_ITEMS = 32


class ExtractorError(Exception):
    """The endpoint could not extract; the message says what went wrong."""


class Extractor(Protocol):
    model: str

    async def extract(self, content: str) -> graph_pb2.GraphDraft: ...


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def parse_graph(text: str) -> graph_pb2.GraphDraft:
    """The model's JSON answer as a GraphDraft (fields it got wrong are dropped; the
    server validates the rest like any caller's draft)."""
    match = _FENCE.match(text.strip())
    try:
        data = json.loads(match.group(1) if match else text)
    except ValueError as exc:
        raise ExtractorError("the model's answer is not JSON") from exc
    if not isinstance(data, dict):
        raise ExtractorError("the model's answer is not a JSON object")
    draft = graph_pb2.GraphDraft()
    types: dict[str, str] = {}  # normalised name -> the first type the model gave it
    for item in data.get("entities") or []:
        if (
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and check.visible(item["name"])
        ):
            kind = item.get("type")
            kind = kind.strip() if isinstance(kind, str) else ""
            given = types.setdefault(check.normalise(item["name"]), kind)
            if given and kind.casefold() != given.casefold():
                kind = ""  # a second type for one entity: the first stands
            draft.entities.add(
                name=item["name"].strip(), type=kind, aliases=_strings(item.get("aliases"))
            )
    # (subject, predicate) -> (single-valued?, its first object): the model's first word
    # stands where it contradicts itself (the server refuses a draft that does).
    first: dict[tuple[str, str], tuple[bool, str]] = {}
    for item in data.get("relations") or []:
        if not isinstance(item, dict):
            continue
        parts = [item.get(k) for k in ("subject", "predicate", "object")]
        if all(isinstance(p, str) and p.strip() for p in parts):
            subject, predicate, obj = (str(p).strip() for p in parts)
            predicate = re.sub(r"[^a-z0-9_:.\-]+", "_", predicate.lower()).strip("_")
            key = (check.normalise(subject), predicate)
            single, first_object = first.setdefault(
                key, (item.get("single_valued") is True, check.normalise(obj))
            )
            if single and check.normalise(obj) != first_object:
                continue  # a second object of a one-valued predicate
            draft.relations.add(
                subject=subject,
                predicate=predicate,
                object=obj,
                cardinality=graph_pb2.CARDINALITY_ONE if single else graph_pb2.CARDINALITY_MANY,
            )
    del draft.entities[MAX_ITEMS:]
    del draft.relations[MAX_ITEMS:]
    return draft


class HttpExtractor:
    """An OpenAI-compatible chat endpoint; ``url`` is the server root (``/v1`` accepted)."""

    def __init__(
        self, *, url: str, model: str, api_key: str | None = None, timeout: float = 30.0
    ) -> None:
        self.endpoint = v1_endpoint(url, "chat/completions")
        self.model = model
        self._api_key = api_key
        self._timeout = timeout

    async def extract(self, content: str) -> graph_pb2.GraphDraft:
        try:
            async with asyncio.timeout(self._timeout):  # the socket timeout is per read
                answer = await asyncio.to_thread(self._post, content)
        except TimeoutError as exc:
            raise ExtractorError(
                f"chat endpoint {self.endpoint} took longer than {self._timeout} s"
            ) from exc
        return parse_graph(answer)

    def _post(self, content: str) -> str:
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": PROMPT},
                {"role": "user", "content": content},
            ],
        }
        try:
            payload = post_json(
                self.endpoint, body, what="chat", api_key=self._api_key, timeout=self._timeout
            )
            answer = payload["choices"][0]["message"]["content"]
        except EndpointError as exc:
            raise ExtractorError(str(exc)) from exc
        except (KeyError, IndexError, TypeError) as exc:
            raise ExtractorError(f"chat endpoint {self.endpoint} sent no chat completion") from exc
        if not isinstance(answer, str):
            raise ExtractorError(f"chat endpoint {self.endpoint} sent no message content")
        return answer


def build_extractor(
    url: str | None, model: str | None, *, api_key: str | None = None, timeout: float = 30.0
) -> HttpExtractor | None:
    """The configured extractor, or None when no URL is set; raises `ExtractorError`."""
    if not url:
        return None
    if not model:
        raise ExtractorError("a graph extraction URL needs a model name (--graph-extract-model)")
    if timeout <= 0:
        raise ExtractorError("the graph extraction timeout must be positive")
    return HttpExtractor(url=url, model=model, api_key=api_key, timeout=timeout)
