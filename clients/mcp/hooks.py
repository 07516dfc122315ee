"""The coding-agent hooks: `brain-mcp hook recall` (prompt submit) prints a context block
for the prompt, `brain-mcp hook capture` (stop, session end) proposes the session's
"remember this" moments for review (what it looks for is in `capture`).

Both act in the scope the tools would (`resolve_scope`) and never get in the agent's way:
every failure is silent (recall) or one line on stderr (capture).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path

from brain.clients import BrainClient, RetryPolicy
from brain.clients.errors import (
    BrainClientError,
    FailedPrecondition,
    InvalidArgument,
    QuotaExceeded,
    RateLimited,
)
from brain.clients.mcp.config import ProxyConfig, resolve_scope

__all__ = ["hook_capture", "hook_recall"]

_log = logging.getLogger("brain.mcp")


def _hook_scope(config: ProxyConfig, timeout: float) -> tuple[ProxyConfig, list[str]]:
    """The scope the tools would act in: WhoAmI with an empty scope, then `resolve_scope`."""
    with BrainClient(
        config.target,
        config.api_key,
        timeout=timeout,
        retry=RetryPolicy(max_attempts=1),
        **{**config.client_options(), "scope": None},
    ) as probe:
        return resolve_scope(config, probe.whoami())


# What BuildContext takes: a query of at most 2,000 characters, a budget of at most 32,000
# tokens (server/domain/validation.py, server/domain/context.py).
MAX_QUERY_CHARS = 2000
MAX_TOKEN_BUDGET = 32_000


def query_of(prompt: str) -> str:
    """The prompt as a query the server takes: a longer one (a question with a pasted log
    or file) keeps its beginning and its end, where the question usually is."""
    prompt = prompt.strip()
    if len(prompt) <= MAX_QUERY_CHARS:
        return prompt
    half = (MAX_QUERY_CHARS - 3) // 2
    return f"{prompt[:half]} … {prompt[-half:]}"


def hook_recall(config: ProxyConfig, stdin: str, env: Mapping[str, str]) -> str:
    """The context block for the hook payload's prompt; "" when there is nothing to add.

    Fails silent: a recall hook must never get in the way of the user's prompt, so a bad
    payload, a missing key, an unreachable server or a refused call all yield "".
    """
    try:
        payload = json.loads(stdin) if stdin.strip() else {}
        prompt = payload.get("prompt") if isinstance(payload, dict) else None
        timeout = float(env.get("BRAIN_HOOK_TIMEOUT") or 2.0)
        budget = int(env.get("BRAIN_HOOK_TOKEN_BUDGET") or 0)
    except ValueError as exc:
        _log.debug("hook recall: unreadable input: %s", exc)
        return ""
    if not isinstance(prompt, str) or not prompt.strip() or not config.api_key:
        return ""
    prompt = query_of(prompt)
    budget = min(max(budget, 0), MAX_TOKEN_BUDGET)  # the server refuses more
    deadline = time.monotonic() + timeout
    try:
        config, problems = _hook_scope(config, timeout)
        if problems:
            _log.debug("hook recall: configuration does not fit the key: %s", problems)
            return ""
        with BrainClient(
            config.target,
            config.api_key,
            timeout=max(0.05, deadline - time.monotonic()),
            retry=RetryPolicy(max_attempts=1),
            **config.client_options(),
        ) as client:
            return client.build_context(prompt, token_budget=budget).context
    except (BrainClientError, OSError, ValueError) as exc:
        _log.debug("hook recall: no context: %s", exc)
        return ""


def hook_capture(config: ProxyConfig, stdin: str, env: Mapping[str, str]) -> str:
    """Propose the session's remember-this moments for review; returns a line for stderr.

    Never raises: a stop hook must not get in the agent's way, so every failure becomes the
    returned line ("" when there was nothing to propose).
    """
    # Imported here so that the recall hook, which runs before every prompt, does not pay it.
    from brain.clients.mcp.capture import (
        CaptureError,
        explicit_requests,
        extract_facts,
        proposals,
        read_transcript,
    )

    try:
        payload = json.loads(stdin) if stdin.strip() else {}
    except ValueError:
        return "hook capture: the payload on stdin is not JSON"
    path = payload.get("transcript_path") if isinstance(payload, dict) else None
    if not isinstance(path, str) or not path:
        return "hook capture: the payload names no transcript_path"
    if not config.api_key:
        return "hook capture: set BRAIN_API_KEY"
    session = str(payload.get("session_id") or "")
    try:
        turns = read_transcript(Path(path).expanduser())
    except CaptureError as exc:
        return f"hook capture: {exc}"
    try:
        extracted = extract_facts(turns, env)
    except CaptureError as exc:  # the explicit requests are still worth proposing
        _log.warning("hook capture: %s", exc)
        extracted = []
    todo = proposals(
        session, explicit_requests(turns), extracted, env.get("BRAIN_CAPTURE_MODEL", "")
    )
    if not todo:
        return ""
    ids: list[str] = []
    refused: list[str] = []
    try:
        config, problems = _hook_scope(config, config.timeout)
        if problems:
            return "hook capture: configuration does not fit the API key: " + "; ".join(problems)
        with BrainClient(
            config.target, config.api_key, timeout=config.timeout, **config.client_options()
        ) as client:
            for p in todo:
                try:
                    response = client.propose(
                        p.content,
                        reason=p.reason,
                        idempotency_key=p.idempotency_key,
                        tags=list(p.tags),
                    )
                except (FailedPrecondition, InvalidArgument, QuotaExceeded, RateLimited) as exc:
                    refused.append(str(exc))  # this one only (e.g. a tombstoned value)
                    continue
                ids.append(response.candidate.id)
    except (BrainClientError, OSError, ValueError) as exc:
        refused.append(str(exc))
    line = f"hook capture: proposed {len(ids)} of {len(todo)} memories for review"
    return line + (f" ({'; '.join(ids)})" if ids else "") + "".join(f"; {r}" for r in refused)
