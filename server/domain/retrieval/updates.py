"""Current state first: when two hits say the same thing with a changed value, the newer
one ranks above the older one for a question about now (issue 34).

Two ACTIVE memories can disagree ("the team meeting is at 2pm on Friday", later "the team
meeting moved to 3pm on Friday"); nothing supersedes the older one until someone says so,
and a search would otherwise rank whichever matches more words. The rule is deterministic:

- *Words* are lower-cased word tokens; *content words* drop a short list of English
  function words.
- A *value* is a token that holds a digit (5433, 2pm, 3:30, v2.1, 2025-01-31), a weekday or
  a month, or a capitalised word that does not open the statement (a name or a place).
- B *updates* A when the two share at least two content words that are not values and
  either (a) those words overlap with Jaccard >= 0.7 and each statement holds a value the
  other lacks (a value changed), or (b) B uses correction language ("no longer", "moved
  to", "now", "instead", "changed to", "correction", ...) and the overlap is >= 0.25.

Newer means a later ``valid_from`` (then a later ``recorded_at``). Only the order of hits
the caller already sees changes; nothing is superseded, hidden or scored differently, and a
question about another time (``as_of``, ``valid_at``, any valid time) keeps the fused order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from brain.server.domain.retrieval.lanes import FusedHit

MIN_SHARED = 2
SAME_STATEMENT = 0.7
CORRECTED_STATEMENT = 0.25
_WORD = re.compile(r"[^\W_][\w:.'/-]*[^\W_]|[^\W_]", re.UNICODE)
_CORRECTION = re.compile(
    r"\b(no longer|not any ?more|moved to|now|instead|changed to|updated to|switched to|"
    r"replaced by|correction|actually|as of|from now on|was raised to|was lowered to)\b",
    re.IGNORECASE,
)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_CALENDAR = _words(
    "monday tuesday wednesday thursday friday saturday sunday january february march "
    "april may june july august september october november december"
)
_FUNCTION_WORDS = _words(
    "a an the and or but if of at by for with about to from in on into onto over under "
    "up down out off is are was were be been being am has have had having do does did "
    "will would shall should can could may might must it its this that these those "
    "there here i me my we us our you your he him his she her they them their as so "
    "than then too very just also not no now new old"
)


@dataclass(frozen=True, slots=True)
class Statement:
    words: frozenset[str]  # content words that are not values
    values: frozenset[str]
    corrects: bool


def statement(text: str) -> Statement:
    """The words and values of one memory's text."""
    words: set[str] = set()
    values: set[str] = set()
    for index, match in enumerate(_WORD.finditer(text)):
        token = match.group(0)
        lower = token.lower().rstrip(".:")
        if (
            any(ch.isdigit() for ch in token)
            or lower in _CALENDAR
            or (index > 0 and token[:1].isupper())
        ):
            values.add(lower)
        elif lower not in _FUNCTION_WORDS:
            words.add(lower)
    return Statement(frozenset(words), frozenset(values), bool(_CORRECTION.search(text)))


def updates(older: Statement, newer: Statement) -> bool:
    """Whether ``newer`` says what ``older`` says with a changed value (the module's rule)."""
    shared = older.words & newer.words
    if len(shared) < MIN_SHARED:
        return False
    overlap = len(shared) / len(older.words | newer.words)
    changed = bool(older.values - newer.values) and bool(newer.values - older.values)
    if overlap >= SAME_STATEMENT and changed:
        return True
    return newer.corrects and overlap >= CORRECTED_STATEMENT


def current_first(hits: Sequence[FusedHit]) -> list[FusedHit]:
    """``hits`` with each newer update moved just above the highest-ranked older statement
    it updates; stable otherwise. One pass in rank order: each hit is compared with the
    hits above it once (on every search about now, so no fixpoint loop)."""
    order = list(hits)
    said = {id(h): statement(str(h.row["content"])) for h in order}
    when = {id(h): (h.row["valid_from"], h.row["recorded_at"]) for h in order}
    for newer in hits:
        at = order.index(newer)
        for above in range(at):
            older = order[above]
            if when[id(newer)] > when[id(older)] and updates(said[id(older)], said[id(newer)]):
                order.insert(above, order.pop(at))
                break
    return order
