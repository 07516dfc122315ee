"""Current state first: when two hits say the same thing with a changed value, the newer
one ranks above the older one for a question about now (issue 34).

Two ACTIVE memories can disagree ("the team meeting is at 2pm on Friday", later "the team
meeting moved to 3pm on Friday"); nothing supersedes the older one until someone says so,
and a search would otherwise rank whichever matches more words. B *updates* A, and moves
just above it, when either

- **a recorded conflict links them**: an open conflict (value update, correction or slot;
  not a restatement, and not one a model judge rejected) found when B was written, with A
  as its older memory (`brain.server.domain.conflicts`). Both memories are hits the caller
  sees and the conflict is read through the caller's visibility, so a memory or a record
  outside the caller's scope never changes the order it sees; or
- **the text rule** says so (deterministic, for namespaces without detection and memories
  written before it):

  - *Tokens*: lower-cased words; a run of an unspaced script (Han, kana, Hangul, Thai,
    Lao, Khmer, Myanmar) gives one token per character, so a Chinese sentence is not one
    word. *Content tokens* drop a short list of English function words.
  - A *value* is a token that holds a digit or a numeral (5433, 2pm, 3:30, v2.1, 三), a
    weekday or a month, or a capitalised word that does not open the statement (a name or
    a place).
  - The *head* is the first two content tokens that are not values: where the subject
    usually is ("the *staging database*" / "the *production database*" differ there).
  - B updates A when the two share at least two content tokens that are not values and
    (a) those overlap with Jaccard >= 0.7 and each statement holds a value the other lacks,
    or (b) each head lies in the other's tokens, the overlap is >= 0.4 and each holds a
    value the other lacks (extra words: "has 8 engineers after the reorg"; any verb:
    "was upgraded to Java 21"), or (c) B uses correction language ("no longer", "moved
    to", "now", "instead", ...) and the overlap is >= 0.25. Or they share one such token
    only, and B uses correction language, both open on it (the same first content token)
    and still hold a value in common while each holds one the other lacks ("The Heron v2
    release is scheduled for March 14" / "The Heron v2 release moved to April 4").

Newer means a later ``valid_from`` (then a later ``recorded_at``). Only the order of hits
the caller already sees changes; nothing is superseded, hidden or scored differently, and a
question about another time (``as_of``, ``valid_at``, any valid time) keeps the fused order.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from brain.server.domain.retrieval.lanes import FusedHit
from brain.v1 import common_pb2

MIN_SHARED = 2
SAME_STATEMENT = 0.7
SAME_SUBJECT = 0.4  # the conflict detectors' value-update overlap (conflicts.detectors)
CORRECTED_STATEMENT = 0.25
HEAD = 2
# A newer statement moves above an older one only with at least this share of its
# relevance: a link (a false one, or a true one to a statement the question is not about)
# put hits at 0.005-0.05 above answers at 0.45-0.72 (an outside review's finding).
RELEVANT_ENOUGH = 0.25
# Scripts written without spaces (the ranges the lexical pipeline segments, migration
# 0050): each character is a token.
_UNSPACED = (
    r"\u1000-\u109f\u1100-\u11ff\u1780-\u17ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff"
    r"\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\u0e00-\u0eff"
)
_LETTER = rf"(?![{_UNSPACED}])[^\W_]"
_WORD = re.compile(
    rf"[{_UNSPACED}]|{_LETTER}(?:(?![{_UNSPACED}])[\w:.'/-])*{_LETTER}|{_LETTER}", re.UNICODE
)
_CORRECTION = re.compile(
    r"\b(no longer|not any ?more|moved to|now|instead|changed to|updated to|switched to|"
    r"replaced by|correction|actually|as of|from now on|was raised to|was lowered to)\b",
    re.IGNORECASE,
)
_ADDITIVE = re.compile(r"\b(also|too|as well|another|in addition|additionally)\b", re.I)


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
    words: frozenset[str]  # content tokens that are not values
    values: frozenset[str]
    corrects: bool
    head: tuple[str, ...] = ()  # the first `HEAD` content tokens that are not values
    lead: frozenset[str] = frozenset()  # values before the first content token
    adds: bool = False  # additive language: "also", "as well", ...


def statement(text: str) -> Statement:
    """The words and values of one memory's text."""
    words: set[str] = set()
    values: set[str] = set()
    head: list[str] = []
    lead: set[str] = set()
    for index, match in enumerate(_WORD.finditer(text)):
        token = match.group(0)
        if unicodedata.category(token[0]).startswith("M"):
            continue  # a lone combining mark (a Thai vowel or tone) says nothing alone
        lower = token.lower().rstrip(".:")
        if (
            any(ch.isnumeric() for ch in token)
            or lower in _CALENDAR
            or (index > 0 and token[:1].isupper())
        ):
            values.add(lower)
            if not head:
                lead.add(lower)
        elif lower not in _FUNCTION_WORDS:
            words.add(lower)
            if len(head) < HEAD and lower not in head:
                head.append(lower)
    return Statement(
        frozenset(words), frozenset(values), bool(_CORRECTION.search(text)), tuple(head),
        frozenset(lead), bool(_ADDITIVE.search(text)),
    )  # fmt: skip


def updates(older: Statement, newer: Statement) -> bool:
    """Whether ``newer`` says what ``older`` says with a changed value (the module's rule)."""
    shared = older.words & newer.words
    if older.lead != newer.lead or older.adds or newer.adds:
        return False
    if len(shared) < MIN_SHARED:
        # One shared word is enough for a correction of the same subject: the same first
        # content word and a name both still hold ("The Heron v2 release is scheduled for
        # March 14" / "The Heron v2 release moved to April 4").
        return (
            len(shared) == 1
            and newer.corrects
            and older.head[:1] == newer.head[:1]
            and bool(older.values & newer.values)
            and bool(older.values - newer.values)
            and bool(newer.values - older.values)
        )
    overlap = len(shared) / len(older.words | newer.words)
    changed = bool(older.values - newer.values) and bool(newer.values - older.values)
    if changed and overlap >= SAME_STATEMENT:
        return True
    subject = set(older.head) <= newer.words and set(newer.head) <= older.words
    if changed and subject and overlap >= SAME_SUBJECT:
        return True
    return newer.corrects and overlap >= CORRECTED_STATEMENT


def links(conflicts: dict[object, list[common_pb2.Conflict]]) -> set[tuple[str, str]]:
    """(older id, newer id) of each recorded conflict that says the newer memory changes a
    value of the older one: open (the caller sees both memories: `conflict_marks`), a value
    update, correction or slot; a restatement disagrees on nothing."""
    return {
        (c.older_id, c.newer_id)
        for found in conflicts.values()
        for c in found
        if c.rule != common_pb2.CONFLICT_RULE_RESTATEMENT
        and c.state == common_pb2.CONFLICT_STATE_OPEN
    }


def current_first(
    hits: Sequence[FusedHit], linked: Collection[tuple[str, str]] = ()
) -> list[FusedHit]:
    """``hits`` with each newer update moved just above the highest-ranked older statement
    it updates (by a recorded conflict in ``linked``, (older id, newer id), or the text
    rule); stable otherwise. One pass in rank order: each hit is compared with the hits
    above it once (on every search about now, so no fixpoint loop)."""
    order = list(hits)
    said = {id(h): statement(str(h.row["content"])) for h in order}
    when = {id(h): (h.row["valid_from"], h.row["recorded_at"]) for h in order}
    key = {id(h): str(h.row.get("memory_id", "")) for h in order}
    for newer in hits:
        at = order.index(newer)
        for above in range(at):
            older = order[above]
            if newer.relevance < older.relevance * RELEVANT_ENOUGH:
                continue  # a weak hit is not promoted over a strong one by a link alone
            if when[id(newer)] > when[id(older)] and (
                (key[id(older)], key[id(newer)]) in linked
                or updates(said[id(older)], said[id(newer)])
            ):
                order.insert(above, order.pop(at))
                break
    return order
