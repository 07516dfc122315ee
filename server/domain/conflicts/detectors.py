"""The deterministic conflict detectors (issue 30): pure functions of two statements.

A *statement* is read from a memory's text:

- *words* are lower-cased word tokens with a light stem (plural and tense endings, a final
  ``e``), without English function words (nor the articles and prepositions of other
  Latin-script languages: `_OTHER_FUNCTION_WORDS`); a token of letters and digits that is not a
  time, version or ordinal is a word too (an identifier: Q3, ipv6);
- a *value* is a token that holds a digit (``5433``, ``2pm``, ``3:30``, ``v2.1``,
  ``2025-01-31``, ``$12,000``), a weekday or month, or a capitalised word that does not
  open the statement (a name or a place). A capitalised opening word is a name unless the
  other statement uses it as an ordinary word ("Priya leads payments" / "Sam is now the
  payments lead" change the lead; "Staging moved" / "the staging database" do not);
- each value has a *type*: time, date, version, number or name;
- the *head* is the first two content words (after a leading pronoun and its verb: "We
  hold the standup"), where the subject usually is.

For an older statement A and a newer B, with ``shared`` their common words, ``overlap`` =
|shared| / |all words| (Jaccard) and *same subject* when each head lies in the other's
words ("the staging database" / "the production database", "the payments team" / "the
payments risk team" are other subjects):

- **value update**: the same subject, at least ``MIN_SHARED`` (2) shared words, overlap >=
  ``SAME_SUBJECT`` (0.4), and for some value type each statement holds a value of that type
  the other lacks ("listens on port 5433" / "is served on port 5434");
- **correction**: the same, when B also uses correction language that A does not ("no
  longer", "moved to", "now", "instead", "took over", "slipped to", "was cut to",
  "correction", ...); or that language, with or without a changed value, over two shared
  words with overlap >= ``CORRECTED_STATEMENT`` (0.25) when the two are *anchored* ("Priya
  no longer leads payments"), or over one shared word and a changed value when both open
  on the same content word ("The hackathon takes place in Munich" / "The hackathon moved
  to Berlin"). *Anchored*: a name or value both hold, the same opening content word (after
  a possessive or a preamble such as "Update:"), or two words side by side in both ("the
  storage upgrade"). Shared words alone are not enough: a team's memories share
  "project", "team" and "lead", and "now" is common;
- **restatement**: the same values and either overlap >= ``RESTATED`` (0.75), or values
  present, the same subject and overlap >= 0.4, or overlap >= 0.5 with a character-shingle
  overlap >= ``RESTATED_SHINGLES`` (0.8: the differing words are spelled alike);
- with embeddings on both sides, a cosine >= ``SEMANTIC_UPDATE`` (0.8) with a changed value
  of one type and a shared word is a value update, and >= ``SEMANTIC_RESTATED`` (0.92)
  with the same values a restatement.

Not conflicts: B adds to a many-valued attribute — additive language ("also", "too", "as
well", "another", "in addition"), or a many-valued verb (likes, speaks, uses, relies on,
supports, runs on, ...) whose changed values are names only, without correction language;
and an A whose words bound its time ("until", "previously", "formerly", "used to"), which a later
value does not contradict.

Tuned on the development half of ``brain-eval conflicts``; the held-out half is reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from brain.server.domain.retrieval.updates import _CALENDAR, _FUNCTION_WORDS, _words
from brain.server.domain.retrieval.updates import _CORRECTION as _UPDATE_CORRECTION

MIN_SHARED = 2
SAME_STATEMENT = 0.7
SAME_SUBJECT = 0.4
CORRECTED_STATEMENT = 0.25
RESTATED = 0.75
RESTATED_SHINGLES = 0.8
SEMANTIC_UPDATE = 0.8
SEMANTIC_RESTATED = 0.92
# Embedders whose cosines the two semantic thresholds do not fit (they were tuned on
# MiniLM's, `local`): multilingual-e5's sit at 0.75-0.95 for any two texts, so 0.8 and one
# shared word took look-alike facts and the same fact of another team in another language
# for value updates (28 of the multilingual held-out set's 88 memories; docs: Conflicts).
# Their writes are compared by the lexical rules alone.
UNCALIBRATED_EMBEDDERS = frozenset({"multilingual"})
SHINGLE = 3

_WORD = re.compile(r"[$€£]?[^\W_][\w:.,'/$%-]*[^\W_%]%?|[^\W_]", re.UNICODE)
# Correction language: the retrieval rule's, and the ways plans and owners change.
_CORRECTION = re.compile(
    _UPDATE_CORRECTION.pattern[:-3]
    + r"|took over|taken over|handed over|slipped to|pushed (back )?to|cut to|"
    r"upgraded to|downgraded to|moved from|bumped to|reduced to|increased to|raised to|"
    r"lowered to|postponed|rescheduled|delayed to|brought forward|moved up to|"
    r"renamed to|switched from|migrated to|relocated to|transferred to|succeeded by|"
    r"has changed|have changed|was changed|is changing|revised to|amended to|"
    r"corrected to|effective immediately|going forward|starting today|anymore|no more)\b",
    re.IGNORECASE,
)
_ADDITIVE = re.compile(
    r"\b(also|too|as well|another|in addition|additionally|besides|both)\b", re.IGNORECASE
)
_TIME = re.compile(r"^\d{1,2}(:\d{2})?(am|pm|h)$|^\d{1,2}:\d{2}")
_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$|^\d{1,2}/\d{1,2}(/\d{2,4})?$")
_VERSION = re.compile(r"^v\d|^\d+\.\d+\.\d+")
# Verbs (stemmed) of attributes that hold many values at once: a new name beside an old
# one adds, it does not replace ("the team uses Postgres" / "the team uses Redis").
_MANY_VALUED_WORDS = (
    "like love enjoy prefer speak use know own visit play read watch support contain "
    "include attend collect hate dislike eat drink have has study learn follow work write "
    "teach need want run rely fluent integrate ship depend build offer accept host serve "
    "partner sell stock carry added add"
)
_PRONOUNS = frozenset(["we", "i", "they", "you"])
# Articles, prepositions and auxiliaries of the other Latin-script languages teams write
# in (Spanish, French, Portuguese, Italian, German, Dutch), where they are no English word:
# as content words they made two look-alikes about other things one subject ("La reunión
# con el cliente ... es el jueves" / "La reunión con el proveedor ... es el lunes").
_OTHER_FUNCTION_WORDS = _words(
    "el la los las lo un una unos unas del al de con en es est y o u que por para se su "
    "sus le les des du et une sont dans sur avec qui au aux ce cette os um uma dos das da "
    "em na nas nos ao à é são com pelo pela il gli di della delle degli nel nella per che "
    "è sono der das dem ein eine einen einem einer und ist sind mit von zu im auf für het "
    "een op te zijn"
)
# Bounds the older statement's valid time in words: it held until then, so a newer value
# does not contradict it ("lived in Munich until 2017" / "has lived in Zurich since 2019").
_BOUNDED = re.compile(r"\b(until|previously|formerly|used to)\b", re.IGNORECASE)
# A token that starts with letters and holds digits names a thing (Q3, ipv6, s3, w17),
# unless it is a time or a version; one that starts with digits is a value with its unit
# (30s, 5gb, 100ms, 2pm).
_IDENTIFIER = re.compile(r"^[a-z][a-z_-]*\d[a-z0-9_-]*$")
_ORDINAL = re.compile(r"^\d+(st|nd|rd|th)$")


class Rule(Enum):
    VALUE_UPDATE = "value_update"
    CORRECTION = "correction"
    SLOT = "slot"
    RESTATEMENT = "restatement"


def _stems(words: str) -> frozenset[str]:
    return frozenset(stem(w) for w in words.split())


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


def is_value(token: str, lower: str) -> bool:
    """Whether a token is a value (see the module): digits, calendar words; not an
    identifier such as Q3."""
    if lower in _CALENDAR:
        return True
    if not any(ch.isdigit() for ch in token):
        return False
    return _not_identifier(lower)


def _not_identifier(lower: str) -> bool:
    """Whether a token that holds a digit is a value rather than an identifier (Q3)."""
    return not (
        _IDENTIFIER.match(lower)
        and not _TIME.match(lower)
        and not _VERSION.match(lower)
        and not _ORDINAL.match(lower)
    )


_MANY_VALUED = _stems(_MANY_VALUED_WORDS)


def value_type(token: str) -> str:
    if _VERSION.match(token):
        return "version"
    if _DATE.match(token) or token in _CALENDAR:
        return "date"
    if _TIME.match(token):
        return "time"
    if not token.isalpha() and any(ch.isdigit() for ch in token):
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
    # Read once per text, so a write compared with many peers tokenises each text once:
    order: tuple[str, ...] = ()  # the stem of every token, in order (for `_head`)
    pronoun: bool = False  # the first token is a pronoun (for `_head`)
    bounded: bool = False  # words that bound the statement's time (`_BOUNDED`)


def _read(token: str) -> tuple[str, str, bool, bool, bool, bool]:
    """What `statement` needs of one token wherever it stands: its lower-cased form, its
    stem, whether it is a value anywhere, a capitalised word without digits (a value after
    the first token), a function word, and a capitalised opening that may be a name."""
    lower = token.lower().rstrip(".:'")
    # No alphabetic character is a digit: most tokens skip the per-character test.
    digits = not token.isalpha() and any(ch.isdigit() for ch in token)
    capital = not digits and token[:1].isupper()
    opens = (
        token[:1].isupper() and token[1:2].islower() and not _CORRECTION.fullmatch(lower)
    )  # fmt: skip
    return (
        lower, stem(lower), lower in _CALENDAR or (digits and _not_identifier(lower)),
        capital, lower in _FUNCTION_WORDS or lower in _OTHER_FUNCTION_WORDS, opens,
    )  # fmt: skip


Reading = dict[str, tuple[str, str, bool, bool, bool, bool]]


def statement(text: str, memo: Reading | None = None) -> Statement:
    """The words and values of one memory's text. ``memo`` keeps each token's reading for
    the texts of one write (words repeat across its peers); it lives as long as that write,
    never longer: no word of one request, or of a memory since forgotten, stays in the
    process."""
    words: set[str] = set()
    values: set[str] = set()
    order: list[str] = []
    opening = ""
    first = ""
    for index, match in enumerate(_WORD.finditer(text)):
        token = match.group(0)
        if memo is None:
            read = _read(token)
        elif (read := memo.get(token)) is None:  # type: ignore[assignment]
            read = memo[token] = _read(token)
        lower, stemmed, value, capital, function, opens = read
        if not index:
            first = lower
        order.append(stemmed)
        if value or (index > 0 and capital):
            values.add(lower)
        elif not function:
            if index == 0 and opens:
                opening = lower
            words.add(stemmed)
    return Statement(
        frozenset(words), frozenset(values), opening, bool(_CORRECTION.search(text)),
        bool(_ADDITIVE.search(text)), " ".join(text.lower().split()), tuple(order),
        first in _PRONOUNS, bool(_BOUNDED.search(text)),
    )  # fmt: skip


def _resolve_opening(a: Statement, b: Statement) -> tuple[Statement, Statement]:
    """A capitalised opening word is a name (a value) unless the other statement uses it
    as an ordinary word."""

    def fix(s: Statement, other: Statement) -> Statement:
        if not s.opening or stem(s.opening) in other.words:
            return s
        return Statement(
            s.words - {stem(s.opening)}, s.values | {s.opening}, "", s.corrects, s.adds,
            s.text, s.order, s.pronoun, s.bounded,
        )  # fmt: skip

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
    if not only_a or not only_b:
        return []
    typed_a, typed_b = _by_type(only_a), _by_type(only_b)
    return [
        (kind, sorted(typed_a[kind]), sorted(typed_b[kind]))
        for kind in _TYPES
        if kind in typed_a and kind in typed_b
    ]


_TYPES = ("time", "date", "version", "number", "name")


def _by_type(values: frozenset[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in values:
        out.setdefault(value_type(v), []).append(v)
    return out


def _head(said: Statement) -> list[str]:
    """The first two content words of a statement (stemmed): where its subject usually is."""
    out: list[str] = []
    # "We hold the standup ...": a pronoun and its verb come before the subject.
    skip = 1 if said.pronoun else 0
    for word in said.order:
        if word not in said.words or word in out or word in _PREAMBLE or _possessive(word):
            continue  # ("Update: the ...", "Heron's CI pipeline": not the subject)
        if skip:
            skip -= 1
            continue
        out.append(word)
        if len(out) == 2:
            break
    return out


def _same_subject(older: Statement, newer: Statement) -> bool:
    """Whether each statement's first two content words (after a leading pronoun and its
    verb) appear in the other: a look-alike about another subject ("the staging database" /
    "the production database", "the payments team" / "the payments risk team") does not."""
    o_head, n_head = _head(older), _head(newer)
    return bool(o_head) and set(o_head) <= newer.words and set(n_head) <= older.words


# Words that open a message rather than its statement ("Update: the storage upgrade ...").
_PREAMBLE = _stems("update actually correction note fyi reminder heads-up")
# Correction language that takes a statement back without a new value ("Priya no longer
# leads payments"); "now" alone says what holds, mostly a new fact beside the old one.
_NEGATES = re.compile(
    r"\b(no longer|not|anymore|no more|instead|rather than|replac(es|ed|ing)|took over|"
    r"takes over|taken over|in place of|succeeded)\b"
)


def _same_named_subject(older: Statement, newer: Statement) -> bool:
    """Whether both statements open on the same content word and name the same things
    before their second one ("The Heron v2 release is scheduled for March 14" / "The
    Heron v2 release moved to April 4"), where the subject is, or still share a name or
    value ("The scheduler is pinned to Python 3.10" / "The scheduler now runs Python
    3.11"). Correction language over
    shared words alone linked a team's memories about its other projects ("Project Heron
    is due on 15 April" / "Project Osprey now has three engineers") and people ("Leo leads
    the data team" / "The data team now ships a weekly report")."""
    o_word, o_named = _subject_of(older)
    n_word, n_named = _subject_of(newer)
    if not o_word or o_word != n_word:
        return False
    return (bool(o_named) and o_named == n_named) or bool(older.values & newer.values)


def _subject_of(said: Statement) -> tuple[str, frozenset[str]]:
    """The first content word (past a possessive's owner or a preamble such as "Update:")
    and the values before the second one."""
    values = {stem(v): v for v in said.values}
    first, named = "", set()
    for token in said.order:
        if _content(said, token):
            if first and token != first:
                break
            first = token
        elif token in values:
            named.add(values[token])
    return first, frozenset(named)


def _adds_a_value(older: Statement, newer: Statement) -> bool:
    """Whether the newer statement holds a number, date, time or version the older lacks,
    of a type the older holds ("The ledger is on Postgres 15" / "The ledger moved from
    Postgres 15 to 16"); a new name says more often what is added than what changed
    ("Project Wren now has a Figma prototype")."""
    kinds = {value_type(v) for v in older.values} - {"name"}
    return any(value_type(v) in kinds for v in newer.values - older.values)


def _subject_names(said: Statement) -> frozenset[str]:
    """The values right next to the first content word, which name the subject ("ward
    7B", "the EMEA sales kickoff", "the Tamarin project demo"): two statements alike but
    for them are about two things, not one changed."""
    values = {stem(v): v for v in said.values}
    order = said.order
    for at, token in enumerate(order):
        if _content(said, token):
            # (Not the opening word: "Dmitri owns the service" names who, not which.)
            near = [order[i] for i in (at - 1, at + 1) if 1 <= i < len(order)]
            return frozenset(values[t] for t in near if t in values)
    return frozenset()


def _content(said: Statement, token: str) -> bool:
    """Whether a token (a stem of `Statement.order`) is a content word that can be the
    subject: not a value or function word, a preamble ("Update:") or a possessive's owner."""
    return token in said.words and token not in _PREAMBLE and not _possessive(token)


def _possessive(token: str) -> bool:
    return token.rstrip("s").endswith("'")


def calibrated_cosine(model: str | None, cosine: float) -> float:
    """``cosine`` (between vectors of ``model``, ``name:model``) as the semantic rules read
    it: 0, no evidence, for an embedder in `UNCALIBRATED_EMBEDDERS`."""
    embedder = (model or "").split(":", 1)[0]
    return 0.0 if embedder in UNCALIBRATED_EMBEDDERS else cosine


def compare(older_text: str, newer_text: str, cosine: float = 0.0) -> Finding | None:
    """What the newer statement does to the older one, by the module's rules (None: no
    conflict). ``cosine`` is their embeddings' similarity, 0 when either has none."""
    return compare_statements(statement(older_text), statement(newer_text), cosine)


def compare_statements(
    older_said: Statement, newer_said: Statement, cosine: float = 0.0
) -> Finding | None:
    """`compare` of two texts read by `statement` (a write reads its own text once for
    all of its peers)."""
    older, newer = _resolve_opening(older_said, newer_said)
    if older.text == newer.text or newer.adds or older.bounded:
        return None
    o_names, n_names = _subject_names(older), _subject_names(newer)
    if o_names and n_names and not o_names & n_names:
        return None  # "Ward 7A has 30 beds" / "Ward 7B has 24 beds": two subjects
    shared = older.words & newer.words
    union = older.words | newer.words
    overlap = len(shared) / len(union) if union else 0.0
    subject = _same_subject(older, newer)
    changed = _changed_types(older, newer)
    detail = "; ".join(f"{k} {', '.join(a)} -> {', '.join(b)}" for k, a, b in changed)
    many = bool(union & _MANY_VALUED) and all(k == "name" for k, _, _ in changed)
    corrects = newer.corrects and not older.corrects
    if changed and not (many and not corrects):
        if len(shared) >= MIN_SHARED and subject and overlap >= SAME_SUBJECT:
            return Finding(Rule.CORRECTION if corrects else Rule.VALUE_UPDATE, overlap, detail)
        about_it = subject or _same_named_subject(older, newer)
        if corrects and shared and about_it:
            return Finding(Rule.CORRECTION, overlap, f"correction: {detail}")
        if cosine >= SEMANTIC_UPDATE and shared:
            return Finding(Rule.CORRECTION if corrects else Rule.VALUE_UPDATE, overlap, detail)
    named = bool(shared) and _same_named_subject(older, newer)
    if corrects and (named or (len(shared) >= MIN_SHARED and overlap >= CORRECTED_STATEMENT)):
        about_it = subject or named
        negates = bool(_NEGATES.search(newer.text))
        if (negates and (about_it or overlap >= RESTATED or bool(older.values & newer.values))) or (
            about_it and _adds_a_value(older, newer)
        ):
            return Finding(Rule.CORRECTION, overlap, "correction")
    if older.values == newer.values:
        restated = len(shared) >= MIN_SHARED and (
            overlap >= RESTATED or (bool(older.values) and overlap >= SAME_SUBJECT and subject)
        )
        if not restated and len(shared) >= MIN_SHARED and overlap >= 0.5:
            sa, sb = _shingles(older.words), _shingles(newer.words)
            restated = len(sa & sb) / len(sa | sb) >= RESTATED_SHINGLES
        if restated or (cosine >= SEMANTIC_RESTATED and shared):
            return Finding(Rule.RESTATEMENT, overlap, "restatement")
    return None
