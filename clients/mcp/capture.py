"""`brain-mcp hook capture`: a session's "remember this" moments become candidates for review.

A coding agent's stop or session-end hook hands over its transcript (Claude Code: a JSONL file
named by `transcript_path` in the hook payload on stdin). Every sentence in which the *user*
asks to remember something ("remember that the staging database is pg-2", "please remember:
…", "don't forget that …", "note for the future: …") becomes a ProposeMemory candidate in the
same scope as the tools. Candidates are never active: a human approves or rejects each one.

When an OpenAI-compatible chat endpoint is configured, the transcript is also sent to it to
extract durable facts, which are proposed the same way:

    BRAIN_CAPTURE_URL      server root, e.g. http://127.0.0.1:11434 (POST {url}/v1/chat/completions)
    BRAIN_CAPTURE_MODEL    model name (required with the URL)
    BRAIN_CAPTURE_API_KEY  bearer token, if the endpoint wants one
    BRAIN_CAPTURE_TIMEOUT  seconds for the extraction request (default 30)

Each candidate's idempotency key is derived from the session id and its content, so running the
hook again over a grown transcript (a stop hook runs after every answer) proposes nothing twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Proposal", "explicit_requests", "extract_facts", "proposals", "read_transcript"]

_log = logging.getLogger("brain.mcp")

MAX_PROPOSALS = 20  # per run: a runaway transcript must not flood the review queue
MAX_CONTENT = 2000  # characters of one candidate
_LLM_CHARS = 24_000  # the tail of the transcript sent for extraction
_TAGS = ("session-capture",)

# A sentence that opens with an explicit request to remember; `fact` is what to remember.
_REQUEST = re.compile(
    r"^(?:(?:please|pls|and|also|oh),?\s+)*"
    r"(?P<verb>remember|memori[sz]e|don'?t forget|do not forget|keep in mind|"
    r"note for (?:the )?future|for future reference)"
    r"(?:\s+(?:that|this))?\s*[:,\-\u2013\u2014]?\s*(?P<fact>.*)$",
    re.IGNORECASE,
)
# Not a request to store a fact: "remember when we…", "remember what…?".
_NOT_A_FACT = re.compile(r"^(?:when|what|how|why|where|who|which|whether|if|me)\b", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

_EXTRACT_PROMPT = (
    "You extract durable team knowledge from a coding session transcript: decisions, "
    "conventions, preferences and facts about the project that will still be true next week. "
    "Skip transient steps, guesses, secrets and credentials. Each fact is one self-contained "
    'sentence. Answer with JSON only: {"memories": ["fact", ...]} (an empty list if none).'
)


class CaptureError(Exception):
    """The transcript or the extraction endpoint could not be read."""


@dataclass(frozen=True)
class Proposal:
    """One candidate to propose: its content, why, and a key that makes it idempotent."""

    content: str
    reason: str
    idempotency_key: str
    tags: tuple[str, ...] = _TAGS


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks: keep text, skip tool calls and results
        return "\n".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return ""


# The transcript's last 8 MiB: a session's recent turns, whatever its length (a stop hook
# must not hold a long session's whole history in memory).
TRANSCRIPT_TAIL_BYTES = 8 * 2**20


def read_transcript(path: Path) -> list[tuple[str, str]]:
    """(role, text) of each user and assistant turn of a Claude Code JSONL transcript (of
    its last `TRANSCRIPT_TAIL_BYTES`; a file that is not a regular file is refused)."""
    turns: list[tuple[str, str]] = []
    try:
        if path.exists() and not path.is_file():  # a FIFO or a device: blocks, or no end
            raise CaptureError(f"transcript {path} is not a regular file")
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - TRANSCRIPT_TAIL_BYTES))
            tail = fh.read(TRANSCRIPT_TAIL_BYTES)
    except OSError as exc:
        raise CaptureError(f"cannot read transcript {path}: {exc.strerror}") from exc
    lines = tail.decode("utf-8", errors="replace").splitlines()
    if size > TRANSCRIPT_TAIL_BYTES:
        lines = lines[1:]  # the first line is cut
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("isMeta") or entry.get("isSidechain"):
            continue
        message = entry.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        if role not in {"user", "assistant"} or not isinstance(message, dict):
            continue
        text = _text_of(message.get("content")).strip()
        # Slash-command echoes and system reminders arrive as user turns wrapped in tags.
        if text and not text.startswith("<"):
            turns.append((str(role), text))
    return turns


def _fact(sentence: str) -> str | None:
    match = _REQUEST.match(sentence.strip())
    if match is None:
        return None
    fact = match["fact"].strip()
    if fact.lower().startswith("to "):  # "remember to run the linter": keep the instruction
        fact = f"{match['verb']} {fact}"
    if len(fact.split()) < 3 or fact.endswith("?") or _NOT_A_FACT.match(fact):
        return None
    return fact[0].upper() + fact[1:]


def explicit_requests(turns: Iterable[tuple[str, str]]) -> list[str]:
    """What the user explicitly asked to remember, in order (assistant turns never count)."""
    found: list[str] = []
    for role, text in turns:
        if role != "user":
            continue
        for line in text.splitlines():
            for sentence in _SENTENCE_END.split(line):
                if (fact := _fact(sentence)) is not None:
                    found.append(fact)
    return found


def extract_facts(turns: Sequence[tuple[str, str]], env: Mapping[str, str]) -> list[str]:
    """Durable facts an OpenAI-compatible chat model finds in the transcript ([] if unset)."""
    root, model = env.get("BRAIN_CAPTURE_URL", "").rstrip("/"), env.get("BRAIN_CAPTURE_MODEL")
    if not root or not model or not turns:
        return []
    transcript = "\n".join(f"{role}: {text}" for role, text in turns)[-_LLM_CHARS:]
    body = {
        "model": model,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": _EXTRACT_PROMPT},
            {"role": "user", "content": transcript},
        ],
    }
    headers = {"Content-Type": "application/json"}
    if api_key := env.get("BRAIN_CAPTURE_API_KEY"):
        headers["Authorization"] = f"Bearer {api_key}"
    endpoint = root.removesuffix("/v1") + "/v1/chat/completions"
    request = urllib.request.Request(endpoint, data=json.dumps(body).encode(), headers=headers)
    try:
        timeout = float(env.get("BRAIN_CAPTURE_TIMEOUT") or 30.0)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.load(response)
        text = answer["choices"][0]["message"]["content"]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise CaptureError(f"extraction at {endpoint} failed: {exc}") from exc
    return _facts_in(str(text))


def _facts_in(text: str) -> list[str]:
    # Models wrap JSON in code fences more often than not.
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip())
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise CaptureError(f"extraction answer is not JSON: {text[:80]!r}") from exc
    items = parsed.get("memories", []) if isinstance(parsed, dict) else parsed
    if not isinstance(items, list):
        raise CaptureError("extraction answer has no list of memories")
    facts = [i.get("content") if isinstance(i, dict) else i for i in items]
    return [f.strip() for f in facts if isinstance(f, str) and f.strip()]


def _normal(text: str) -> str:
    return " ".join(text.casefold().split())


def proposals(
    session_id: str, explicit: Iterable[str], extracted: Iterable[str], model: str = ""
) -> list[Proposal]:
    """The candidates to propose: each distinct fact once, explicit requests first, capped."""
    seen: set[str] = set()
    out: list[Proposal] = []
    sources = [
        (explicit, f"The user asked to remember this in agent session {session_id or '?'}."),
        (extracted, f"Extracted by {model or 'a model'} from agent session {session_id or '?'}."),
    ]
    for facts, reason in sources:
        for fact in facts:
            content = fact[:MAX_CONTENT]
            if (normal := _normal(content)) in seen:
                continue
            seen.add(normal)
            digest = hashlib.sha256(f"{session_id}\0{normal}".encode()).hexdigest()[:32]
            out.append(Proposal(content, reason, f"capture-{digest}"))
    return out[:MAX_PROPOSALS]
