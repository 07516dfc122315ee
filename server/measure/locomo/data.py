"""The LoCoMo file: conversations, their dated turns, and the questions asked about them.

Each turn becomes one memory, ``"<speaker>: <text>"`` plus the image caption, valid from its
session's date (taken as UTC). A question is asked when it is of categories 1-4 and has
evidence; the adversarial ones (category 5) are kept apart for the silence check.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_SESSION = re.compile(r"session_(\d+)")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y")
ADVERSARIAL = 5  # LoCoMo's category of questions the conversation does not answer


class DataError(Exception):
    """The file is not in the LoCoMo format; the message says where and what."""


@dataclass(frozen=True)
class Turn:
    dia_id: str
    content: str
    valid_from: datetime
    speaker: str = ""
    text: str = ""


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    adversarial: list[str] = field(default_factory=list)  # category-5 question texts


def load_locomo(path: Path) -> list[Conversation]:
    """Read a LoCoMo-format file; raises `DataError` naming the first problem."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(raw, list) or not raw:
        raise DataError(f"{path}: expected a non-empty JSON list of LoCoMo samples")
    conversations = [_conversation(sample, i) for i, sample in enumerate(raw)]
    if not any(c.questions for c in conversations):
        raise DataError(f"{path}: no question of categories 1-4 has evidence; nothing to ask")
    return conversations


def _conversation(sample: Any, index: int) -> Conversation:
    where = f"sample {index}"
    if not isinstance(sample, dict):
        raise DataError(f"{where}: expected an object with 'conversation' and 'qa'")
    sample_id = str(sample.get("sample_id") or f"sample-{index}")
    where = f"sample {sample_id!r}"
    conv, qa = sample.get("conversation"), sample.get("qa")
    if not isinstance(conv, dict) or not isinstance(qa, list):
        raise DataError(f"{where}: expected 'conversation' (object) and 'qa' (list)")
    turns: list[Turn] = []
    sessions = sorted(
        (int(m.group(1)), key) for key in conv if (m := _SESSION.fullmatch(key)) is not None
    )
    if not sessions:
        raise DataError(f"{where}: the conversation has no session_N lists")
    for _, key in sessions:
        if not isinstance(conv[key], list):
            raise DataError(f"{where} {key}: expected a list of turns")
        if not conv[key]:
            continue  # an empty session needs no date
        when = session_time(conv.get(f"{key}_date_time"), f"{where} {key}_date_time")
        turns.extend(_turn(t, when, f"{where} {key}[{i}]") for i, t in enumerate(conv[key]))
    questions = [q for i, item in enumerate(qa) if (q := _question(item, f"{where} qa[{i}]"))]
    adversarial = [
        item["question"].strip()
        for item in qa
        if isinstance(item, dict)
        and item.get("category") == ADVERSARIAL
        and isinstance(item.get("question"), str)
        and item["question"].strip()
    ]
    return Conversation(sample_id, turns, questions, adversarial)


def session_time(value: Any, where: str) -> datetime:
    """Parse a LoCoMo session date such as ``"1:56 pm on 8 May, 2023"`` (taken as UTC)."""
    if not isinstance(value, str):
        raise DataError(f"{where}: missing; expected a date like '1:56 pm on 8 May, 2023'")
    for fmt in _DATE_FORMATS:
        with contextlib.suppress(ValueError):
            return datetime.strptime(value.strip(), fmt).replace(tzinfo=UTC)
    raise DataError(f"{where}: {value!r} is not a date like '1:56 pm on 8 May, 2023'")


def _turn(item: Any, when: datetime, where: str) -> Turn:
    if not isinstance(item, dict):
        raise DataError(f"{where}: expected an object with speaker, dia_id and text")
    speaker, dia_id, text = item.get("speaker"), item.get("dia_id"), item.get("text")
    if not (isinstance(speaker, str) and isinstance(dia_id, str) and isinstance(text, str)):
        raise DataError(f"{where}: speaker, dia_id and text must all be strings")
    content = f"{speaker}: {text}"
    caption = item.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        content += f" [image: {caption.strip()}]"
    return Turn(dia_id=dia_id.strip(), content=content, valid_from=when, speaker=speaker, text=text)


def _question(item: Any, where: str) -> Question | None:
    """The question if it is asked (categories 1-4, with evidence), else None."""
    if not isinstance(item, dict):
        raise DataError(f"{where}: expected an object with question, evidence and category")
    category, text = item.get("category"), item.get("question")
    if not isinstance(category, int) or isinstance(category, bool):
        raise DataError(f"{where}: 'category' must be an integer")
    if category not in CATEGORIES:
        return None
    if not isinstance(text, str):
        raise DataError(f"{where}: 'question' must be a string")
    evidence = evidence_ids(item.get("evidence"), where)
    if not evidence or not text.strip():
        return None
    return Question(text=text.strip(), category=category, evidence=evidence)


def evidence_ids(value: Any, where: str = "evidence") -> frozenset[str]:
    """Evidence dia_ids; splits malformed entries such as ``"D1:3; D1:4"``."""
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(e, str) for e in value):
        raise DataError(f"{where}: 'evidence' must be a list of dia_id strings")
    return frozenset(p.strip() for e in value for p in re.split(r"[;,]", e) if p.strip())
