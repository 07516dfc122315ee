"""An optional model judge for conflicts (issue 30): an OpenAI-compatible chat endpoint
(the one graph extraction uses) asked whether a detected conflict is real.

The judge may only advise. It runs after the write has committed, never in its way; its
verdict is stored on the open conflict ("confirmed" or "rejected", with its reason) for
the reviewer, and a rejected conflict no longer marks search hits as possibly outdated.
It never supersedes, dismisses or changes a memory: a reviewer still decides. Without an
endpoint, or when it fails, everything works as before and the conflict waits unjudged.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

import structlog

from brain.authz import Caller
from brain.server.domain.endpoints import EndpointError, post_json, v1_endpoint
from brain.server.errors import BrainError
from brain.server.storage import conflicts as conflicts_sql
from brain.server.storage import memories as memory_sql
from brain.v1 import common_pb2

_log = structlog.get_logger("brain.conflicts")

PROMPT = (
    "You check conflicts between two memories of a team's shared memory. The NEWER "
    "statement was found to update, correct or restate the OLDER one. Answer with JSON "
    'only: {"verdict": "confirmed" or "rejected", "reason": "<one short sentence>"}. '
    "confirmed: both are about the same subject and attribute, and the newer one changes "
    "or repeats what the older one says. rejected: they are about different things, or "
    "the newer one adds to the older one without contradicting it."
)
VERDICTS = ("confirmed", "rejected")


class JudgeError(Exception):
    """The judge could not answer; the conflict stays unjudged."""


class Judge(Protocol):
    model: str

    async def judge(self, older: str, newer: str, rule: str) -> tuple[str, str]: ...


class HttpJudge:
    """The chat endpoint at ``url`` (the server root; ``/v1`` accepted)."""

    def __init__(
        self, *, url: str, model: str, api_key: str | None = None, timeout: float = 30.0
    ) -> None:
        self.endpoint = v1_endpoint(url, "chat/completions")
        self.model = model
        self._api_key = api_key
        self._timeout = timeout

    async def judge(self, older: str, newer: str, rule: str) -> tuple[str, str]:
        """(verdict, reason) for one conflict."""
        try:
            async with asyncio.timeout(self._timeout):
                answer = await asyncio.to_thread(self._post, older, newer, rule)
        except TimeoutError as exc:
            raise JudgeError(f"chat endpoint {self.endpoint} took too long") from exc
        return parse_verdict(answer)

    def _post(self, older: str, newer: str, rule: str) -> str:
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": PROMPT},
                {"role": "user", "content": f"RULE: {rule}\nOLDER: {older}\nNEWER: {newer}"},
            ],
        }
        try:
            payload = post_json(
                self.endpoint, body, what="chat", api_key=self._api_key, timeout=self._timeout
            )
            answer = payload["choices"][0]["message"]["content"]
        except EndpointError as exc:
            raise JudgeError(str(exc)) from exc
        except (KeyError, IndexError, TypeError) as exc:
            raise JudgeError(f"chat endpoint {self.endpoint} sent no chat completion") from exc
        if not isinstance(answer, str):
            raise JudgeError(f"chat endpoint {self.endpoint} sent no message content")
        return answer


def parse_verdict(text: str) -> tuple[str, str]:
    """The verdict of a model's answer: JSON, possibly fenced; anything else is an error."""
    body = text.strip().removeprefix("```json").removeprefix("```").removesuffix("```")
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise JudgeError("the judge's answer is not JSON") from exc
    verdict = str(data.get("verdict", "")).lower() if isinstance(data, dict) else ""
    if verdict not in VERDICTS:
        raise JudgeError(f"the judge's verdict {verdict!r} is neither of {VERDICTS}")
    return verdict, str(data.get("reason", ""))[:500]


async def judge_after_commit(
    memories: Any, judge: Judge, caller: Caller, found: Sequence[common_pb2.Conflict]
) -> None:
    """Ask ``judge`` about each open conflict a committed write recorded, and store its
    verdict on the conflict if it is still open and the writer still sees both memories.
    ``memories`` is the `Memories` service (its transactions and visibility)."""
    vis = memories.visibility(caller)
    for conflict in found:
        if conflict.state != common_pb2.CONFLICT_STATE_OPEN or not conflict.id:
            continue
        try:
            async with memories.tx(caller, readonly=True) as conn:
                older, newer = [
                    await memory_sql.get_memory(
                        conn, vis, uuid.UUID(memory_id), memory_sql.TimeCoords()
                    )
                    for memory_id in (conflict.older_id, conflict.newer_id)
                ]
            if older is None or newer is None:  # gone, or no longer visible to the writer
                continue
            rule = common_pb2.ConflictRule.Name(conflict.rule).removeprefix("CONFLICT_RULE_")
            verdict, reason = await judge.judge(older["content"], newer["content"], rule.lower())
            async with memories.tx(caller) as conn:
                await conflicts_sql.set_verdict(
                    conn, vis, uuid.UUID(conflict.id),
                    f"{verdict} by {judge.model}" + (f": {reason}" if reason else ""),
                )  # fmt: skip
        except JudgeError as exc:
            _log.warning("conflict not judged", conflict_id=conflict.id, error=str(exc))
        except BrainError as exc:
            _log.warning("conflict not judged", conflict_id=conflict.id, error=exc.message)
