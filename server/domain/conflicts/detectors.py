"""The deterministic conflict detectors (issue 30): pure functions of two statements.

A *statement* is read from a memory's text (``brain.server.domain.retrieval.updates``
reads it the same way for ranking):

- *words* are lower-cased word tokens with a light stem (plural and tense endings, a final
  ``e``), without English function words;
- a *value* is a token that holds a digit (``5433``, ``2pm``, ``3:30``, ``v2.1``,
  ``2025-01-31``, ``$40``), a weekday or month, or a capitalised word that does not open
  the statement (a name or a place). A capitalised opening word counts as a value only
  when the other statement does not use the same word: "Priya leads payments" / "Sam is
  now the payments lead" change the lead, "Staging moved" / "the staging database" do not.
- Each value has a *type*: time, date, version, number or name.

For an older statement A and a newer B, with ``shared`` their common words and
``overlap`` = |shared| / |all words| (Jaccard):

- **value update**: overlap >= ``SAME_STATEMENT`` (0.7), at least ``MIN_SHARED`` (2)
  shared words, and for some value type each statement holds a value of that type the
  other lacks;
- **correction**: B uses correction language ("no longer", "moved to", "now", "instead",
  "changed to", "correction", ...) that A does not, and shares at least ``MIN_SHARED``
  words with overlap >= ``CORRECTED_STATEMENT`` (0.25) — or one word when a value of one
  type changed;
- **restatement**: the same values (or none) and overlap >= ``RESTATED`` (0.75), or
  overlap >= 0.5 and a character-shingle overlap of the content words >=
  ``RESTATED_SHINGLES`` (0.8: the words that differ are spelled alike);
- with embeddings on both sides, a cosine >= ``SEMANTIC_UPDATE`` (0.8) with a changed value
  of one type and a shared word is a value update, and >= ``SEMANTIC_RESTATED`` (0.92)
  with the same values a restatement.

Not conflicts: B adds to a many-valued attribute — additive language ("also", "too", "as
well", "another", "in addition") or a many-valued verb (likes, speaks, uses, knows, has,
visited, ...) whose changed values are names only, without correction language.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from brain.server.domain.retrieval.updates import _CALENDAR, _CORRECTION, _FUNCTION_WORDS

MIN_SHARED = 2
SAME_STATEMENT = 0.7
CORRECTED_STATEMENT = 0.25
RESTATED = 0.75
RESTATED_SHINGLES = 0.8
SEMANTIC_UPDATE = 0.8
SEMANTIC_RESTATED = 0.92
SHINGLE = 3

_WORD = re.compile(r"[$€£]?[^\W_][\w:.'/$%-]*[^\W_%]%?|[^\W_]", re.UNICODE)
_ADDITIVE = re.compile(
    r"\b(also|too|as well|another|in addition|additionally|besides|both)\b", re.IGNORECASE
)
_TIME = re.compile(r"^\d{1,2}(:\d{2})?(am|pm|h)$|^\d{1,2}:\d{2}")
_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$|^\d{1,2}/\d{1,2}(/\d{2,4})?$")
_VERSION = re.compile(r"^v\d|^\d+\.\d+\.\d+")
_MANY_VALUED = frozenset(
    [
        "like",
        "love",
        "enjoy",
        "prefer",
        "speak",
        "use",
        "know",
        "own",
        "visit",
        "play",
        "read",
        "watch",
        "support",
        "contain",
        "include",
        "attend",
        "collect",
        "hate",
        "dislike",
        "eat",
        "drink",
        "have",
        "has",
        "study",
        "learn",
        "follow",
        "work",
        "write",
        "teach",
        "need",
        "want",
    ]
)


class Rule(Enum):
    VALUE_UPDATE = "value_update"
    CORRECTION = "correction"
    SLOT = "slot"
    RESTATEMENT = "restatement"


def stem(word: str) -> str:
    """A light, consistent stem: leads/lead, moved/move, listens/listen, cities/city."""
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


def value_type(token: str) -> str:
    if _VERSION.match(token):
        return "version"
    if _DATE.match(token) or token in _CALENDAR:
        return "date"
    if _TIME.match(token):
        return "time"
    if any(ch.isdigit() for ch in token):
        return "number"
    return "name"


@dataclass(frozen=True, slots=True)
class Statement:
    words: frozenset[str]
    values: frozenset[str]
    opening: str  # a capitalised opening word: a name, or an ordinary word (see module)
    corrects: bool
    adds: bool
    text: str


def statement(text: str) -> Statement:
    """The words and values of one memory's text."""
    words: set[str] = set()
    values: set[str] = set()
    opening = ""
    for index, match in enumerate(_WORD.finditer(text)):
        token = match.group(0)
        lower = token.lower().rstrip(".:'")
        if (
            any(ch.isdigit() for ch in token)
            or lower in _CALENDAR
            or (index > 0 and token[:1].isupper())
        ):
            values.add(lower)
        elif lower not in _FUNCTION_WORDS:
            if index == 0 and token[:1].isupper() and token[1:2].islower():
                opening = lower
            words.add(stem(lower))
    return Statement(
        frozenset(words), frozenset(values), opening, bool(_CORRECTION.search(text)),
        bool(_ADDITIVE.search(text)), " ".join(text.lower().split()),
    )  # fmt: skip


def _resolve_opening(a: Statement, b: Statement) -> tuple[Statement, Statement]:
    """A capitalised opening word the other statement does not use is a name (a value)."""

    def fix(s: Statement, other: Statement) -> Statement:
        if not s.opening or s.opening in other.values or stem(s.opening) in other.words:
            return s
        return Statement(
            s.words - {stem(s.opening)}, s.values | {s.opening}, "", s.corrects, s.adds, s.text
        )

    return fix(a, b), fix(b, a)


def _shingles(words: frozenset[str]) -> set[str]:
    text = " ".join(sorted(words))
    return {text[i : i + SHINGLE] for i in range(max(1, len(text) - SHINGLE + 1))}


@dataclass(frozen=True, slots=True)
class Finding:
    rule: Rule
    overlap: float
    detail: str


def _changed_types(a: Statement, b: Statement) -> list[tuple[str, list[str], list[str]]]:
    """For each value type, the values only A holds and only B holds, when both hold one."""
    only_a, only_b = a.values - b.values, b.values - a.values
    out = []
    for kind in ("time", "date", "version", "number", "name"):
        xa = sorted(v for v in only_a if value_type(v) == kind)
        xb = sorted(v for v in only_b if value_type(v) == kind)
        if xa and xb:
            out.append((kind, xa, xb))
    return out


def compare(older_text: str, newer_text: str, cosine: float = 0.0) -> Finding | None:
    """What the newer statement does to the older one, by the module's rules (None: no
    conflict). ``cosine`` is their embeddings' similarity, 0 when either has none."""
    older, newer = _resolve_opening(statement(older_text), statement(newer_text))
    if older.text == newer.text:
        return None
    shared = older.words & newer.words
    union = older.words | newer.words
    overlap = len(shared) / len(union) if union else 0.0
    changed = _changed_types(older, newer)
    detail = "; ".join(f"{k} {', '.join(a)} -> {', '.join(b)}" for k, a, b in changed)
    additive = newer.adds and not newer.corrects
    many = bool(shared & _MANY_VALUED) and all(k == "name" for k, _, _ in changed)
    if changed and not additive and not (many and not newer.corrects):
        if len(shared) >= MIN_SHARED and overlap >= SAME_STATEMENT:
            return Finding(Rule.VALUE_UPDATE, overlap, detail)
        if newer.corrects and (
            (len(shared) >= MIN_SHARED and overlap >= CORRECTED_STATEMENT) or len(shared) >= 1
        ):
            return Finding(Rule.CORRECTION, overlap, f"correction: {detail}")
        if cosine >= SEMANTIC_UPDATE and shared:
            return Finding(Rule.VALUE_UPDATE, overlap, detail)
    if (
        newer.corrects
        and not older.corrects
        and not additive
        and len(shared) >= MIN_SHARED
        and overlap >= CORRECTED_STATEMENT
    ):
        return Finding(Rule.CORRECTION, overlap, "correction")
    if older.values == newer.values and not additive:
        restated = overlap >= RESTATED and len(shared) >= MIN_SHARED
        if not restated and len(shared) >= MIN_SHARED and overlap >= 0.5:
            sa, sb = _shingles(older.words), _shingles(newer.words)
            restated = len(sa & sb) / len(sa | sb) >= RESTATED_SHINGLES
        if restated or (cosine >= SEMANTIC_RESTATED and shared):
            return Finding(Rule.RESTATEMENT, overlap, "restatement")
    return None
