"""Validation of a memory's GraphDraft, and the entity names a query may mean."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from brain.server.domain import validation as check
from brain.server.errors import InvalidArgument, NotFound
from brain.server.storage import graph as sql
from brain.v1 import graph_pb2

MAX_ENTITIES = 64
MAX_RELATIONS = 64
MAX_ALIASES = 16
MAX_NAME_CHARS = 200
MAX_DEPTH = 3
# ListNeighbours walks at most this many paths (nearest first) before it stops.
MAX_WALK_PATHS = 10_000
DEFAULT_LIMIT = 50
# Query n-grams tried as entity names by the graph lane.
MAX_QUERY_WORDS = 4
MAX_QUERY_NAMES = 256
# A query the names were cut from is read without them only when at least this many words
# are left ("Who is Alice?" keeps its name: "Who is" asks nothing on its own).
MIN_WORDS_LEFT = 3
ENTITY_NOT_FOUND = "entity not found"
_PREDICATE = re.compile(r"^[a-z0-9][a-z0-9_:.\-]{0,63}$")
_WORD = re.compile(r"[\w][\w&.\-]*")
_POSSESSIVE = re.compile("['\u2019]s\\b")
_ANY_CASE_POSSESSIVE = re.compile("['\u2019]s\\b", re.IGNORECASE)
# What a cut name takes with it: its possessive, also the bare one ("James' dog").
_CUT_POSSESSIVE = re.compile("['\u2019](?:s\\b)?", re.IGNORECASE)
CARDINALITY = {
    graph_pb2.CARDINALITY_UNSPECIFIED: "many",
    graph_pb2.CARDINALITY_MANY: "many",
    graph_pb2.CARDINALITY_ONE: "one",
}
CARDINALITY_TO_PROTO = {"many": graph_pb2.CARDINALITY_MANY, "one": graph_pb2.CARDINALITY_ONE}


def entity_not_found() -> NotFound:
    """The one NOT_FOUND for an entity: identical for unknown and invisible names."""
    return NotFound(ENTITY_NOT_FOUND)


@dataclass(frozen=True)
class Assertions:
    """A validated GraphDraft: the mentions and relations one memory asserts."""

    mentions: list[sql.NewMention] = field(default_factory=list)
    relations: list[sql.NewRelation] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.mentions)


NOTHING = Assertions()


def normalise_name(field_name: str, value: str) -> str:
    check.text(field_name, value, limit=MAX_NAME_CHARS)
    norm = check.normalise(value)
    if not norm:
        raise InvalidArgument(field_name, "must not be empty")
    if not check.visible(norm):
        # Zero-width and other format or control characters only: a name nobody can read
        # or type back (U+200B alone would be one entity, U+200C another).
        raise InvalidArgument(field_name, "must contain a visible character")
    return norm


def parse_draft(
    prefix: str, draft: graph_pb2.GraphDraft, valid_from: datetime, valid_to: datetime | None
) -> Assertions:
    """Validate a GraphDraft (every failure names its field); relations default to the
    memory's valid time."""
    if len(draft.entities) > MAX_ENTITIES:
        raise InvalidArgument(f"{prefix}.entities", f"at most {MAX_ENTITIES} entities")
    if len(draft.relations) > MAX_RELATIONS:
        raise InvalidArgument(f"{prefix}.relations", f"at most {MAX_RELATIONS} relations")
    mentions: dict[str, sql.NewMention] = {}
    names: dict[str, str] = {}  # any normalised name or alias -> the entity's name
    for i, e in enumerate(draft.entities):
        at = f"{prefix}.entities[{i}]"
        norm = normalise_name(f"{at}.name", e.name)
        if len(e.aliases) > MAX_ALIASES:
            raise InvalidArgument(f"{at}.aliases", f"at most {MAX_ALIASES} aliases")
        aliases = [a.strip() for a in e.aliases]
        alias_norms = [normalise_name(f"{at}.aliases", a) for a in e.aliases]
        for n in (norm, *alias_norms):
            if names.get(n, norm) != norm:
                raise InvalidArgument(at, f"'{n}' already names another entity of this draft")
            names[n] = norm
        kind = check.text(f"{at}.type", e.type, limit=64).strip()
        earlier = mentions.get(norm)
        if earlier is not None:  # the same entity twice: merge
            if kind and earlier.type and kind.casefold() != earlier.type.casefold():
                raise InvalidArgument(
                    f"{at}.type",
                    f"'{kind}' differs from '{earlier.type}', the type this draft gave "
                    f"'{earlier.name}' before; one entity has one type",
                )
            aliases = [*earlier.aliases, *aliases]
            alias_norms = [*earlier.alias_norms, *alias_norms]
            kind = earlier.type or kind
        alias_norms_set = sorted(set(alias_norms) - {norm})
        mentions[norm] = sql.NewMention(
            name_norm=norm,
            name=e.name.strip(),
            type=kind,
            aliases=tuple(sorted({a for a in aliases if check.normalise(a) != norm})),
            alias_norms=tuple(alias_norms_set),
        )
    relations: list[tuple[int, sql.NewRelation]] = []  # (index in the draft, relation)
    for i, r in enumerate(draft.relations):
        at = f"{prefix}.relations[{i}]"
        ends = []
        for side, value in (("subject", r.subject), ("object", r.object)):
            norm = normalise_name(f"{at}.{side}", value)
            norm = names.get(norm, norm)
            if norm not in mentions:  # mentioned implicitly
                mentions[norm] = sql.NewMention(norm, value.strip(), "", (), ())
                names[norm] = norm
            ends.append(norm)
        if ends[0] == ends[1]:
            raise InvalidArgument(f"{at}.object", "must name another entity than the subject")
        predicate = check.text(f"{at}.predicate", r.predicate, limit=64)
        if not _PREDICATE.match(predicate):
            raise InvalidArgument(
                f"{at}.predicate",
                "must be 1-64 lower-case letters, digits and _ : . - (such as lives_in)",
            )
        if r.cardinality not in CARDINALITY:
            raise InvalidArgument(f"{at}.cardinality", f"unknown cardinality {r.cardinality}")
        starts = check.timestamp(r.valid_from, r.HasField("valid_from")) or valid_from
        ends_at = check.timestamp(r.valid_to, r.HasField("valid_to"))
        if not r.HasField("valid_from") and not r.HasField("valid_to"):
            ends_at = valid_to
        if ends_at is not None and ends_at < starts:
            raise InvalidArgument(f"{at}.valid_to", "must not be before valid_from")
        new = sql.NewRelation(
            subject=ends[0],
            predicate=predicate,
            object=ends[1],
            cardinality=CARDINALITY[r.cardinality],
            valid_from=starts,
            valid_to=ends_at,
        )
        if any(new == kept for _, kept in relations):  # the same relation twice: once
            continue
        _consistent(f"{prefix}.relations", i, new, relations)
        relations.append((i, new))
    return Assertions(mentions=list(mentions.values()), relations=[r for _, r in relations])


def _consistent(
    field_name: str, i: int, new: sql.NewRelation, earlier: list[tuple[int, sql.NewRelation]]
) -> None:
    """A draft may not contradict itself: one subject's predicate is one-valued or
    many-valued, and a one-valued predicate holds one object at a time."""
    for j, old in earlier:
        if (old.subject, old.predicate) != (new.subject, new.predicate):
            continue
        if old.cardinality != new.cardinality:
            raise InvalidArgument(
                f"{field_name}[{i}].cardinality",
                f"'{new.predicate}' is {new.cardinality}-valued here and "
                f"{old.cardinality}-valued in {field_name}[{j}]",
            )
        if new.cardinality == "one" and old.object != new.object and _overlap(old, new):
            raise InvalidArgument(
                f"{field_name}[{i}].object",
                f"'{new.predicate}' holds one object at a time, and {field_name}[{j}] gives "
                "it another over the same valid time",
            )


def _overlap(a: sql.NewRelation, b: sql.NewRelation) -> bool:
    """Whether two valid-time intervals [from, to) share a moment (no end: for ever)."""
    return (b.valid_to is None or a.valid_from < b.valid_to) and (
        a.valid_to is None or b.valid_from < a.valid_to
    )


def query_names(query: str) -> list[str]:
    """Candidate entity names in a query: its word n-grams (up to four words), normalised
    like entity names, possessives dropped."""
    text = _POSSESSIVE.sub("", check.normalise(query))
    words = [w.strip(".-") for w in _WORD.findall(text) if w.strip(".-")]
    out: dict[str, None] = {}
    for n in range(1, MAX_QUERY_WORDS + 1):
        for i in range(len(words) - n + 1):
            out[" ".join(words[i : i + n])] = None
            if len(out) >= MAX_QUERY_NAMES:
                return list(out)
    return list(out)


def without_names(query: str, names: Collection[str]) -> str:
    """``query`` with every run of its words that normalises to one of ``names`` (as
    `query_names` normalises; the longest run first) cut out, with its possessive.

    The semantic lane reads this (see `Reads.recall`): a small sentence embedder lets a
    person's or project's name outweigh what is asked about them, while the lexical
    lanes and the ``named`` feature already match the name. In a query that capitalises
    anything, a run written in lower case is a word, not the name ("when *will* Will
    go"). ``query`` itself when nothing was cut or fewer than `MIN_WORDS_LEFT` words
    would be left."""
    wanted = set(names)
    if not wanted:
        return query
    text = unicodedata.normalize("NFKC", query)
    cased = any(ch.isupper() for ch in text)
    # Possessives blanked, not removed, so every word keeps its offsets in ``text``.
    bare = _ANY_CASE_POSSESSIVE.sub(lambda m: " " * len(m.group()), text)
    words = [(m.start(), m.end(), m.group().casefold().strip(".-")) for m in _WORD.finditer(bare)]
    words = [w for w in words if w[2]]
    cuts: list[tuple[int, int]] = []
    i = 0
    while i < len(words):
        for n in range(min(MAX_QUERY_WORDS, len(words) - i), 0, -1):
            if " ".join(w[2] for w in words[i : i + n]) in wanted and not (
                cased and text[words[i][0]].islower()
            ):
                end = words[i + n - 1][1]
                possessive = _CUT_POSSESSIVE.match(text, end)
                cuts.append((words[i][0], possessive.end() if possessive else end))
                i += n
                break
        else:
            i += 1
    if not cuts:
        return query
    kept, at = [], 0
    for start, end in cuts:
        kept.append(text[at:start])
        at = end
    kept.append(text[at:])
    left = " ".join("".join(kept).split())
    if len(_WORD.findall(left)) < MIN_WORDS_LEFT:
        return query
    return left
