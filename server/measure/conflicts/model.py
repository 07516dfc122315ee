"""The labelled set's shape: pairs of statements, where each is written, what should be found.

A `Case` is two memories saved in order (the older, then the newer) and its label:
``expect`` is what the newer one is to the older by content (``supersede``: a value update,
a correction or a single-valued graph slot; ``merge``: a restatement; ``none``: an addition
to a multi-valued attribute, a look-alike about another subject, a relation of the past),
and ``rule`` the `ConflictRule` that should name it. Where the two are written decides
whether a proposal may be made at all: only when the newer reaches every reader of the
older (`reaches`, the graph's fact-closing rule). A case whose placements fail it is
``must_not_propose``, whatever its content; `sees` says whether the newer's writer can see
the older at all (if not, its response must not name it).

A `ConsolidationSet` is one namespace of restatement groups (a few wordings of one fact in
one cell), copies of a group in other cells, and distractors: ConsolidateMemories should
propose one cluster per group and never join two cells.

`dump` and `load` write and read a set as JSON (``brain-eval conflicts --dump`` /
``--data``): the format in which an outside set is given.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

EXPECTS = ("supersede", "merge", "none")
RULES = ("VALUE_UPDATE", "CORRECTION", "SLOT", "RESTATEMENT")
PATHS = ("save", "update", "approve")
FORMAT = "brain-eval-conflicts/1"


@dataclass(frozen=True)
class Fact:
    """A graph relation a statement asserts (GraphDraft); dates are ISO ``YYYY-MM-DD``."""

    subject: str
    predicate: str
    object: str
    single_valued: bool
    subject_type: str = ""
    object_type: str = ""
    valid_from: str = ""
    valid_to: str = ""


@dataclass(frozen=True)
class Statement:
    text: str
    facts: tuple[Fact, ...] = ()
    # The memory's valid time (ISO dates); empty: the server's default (now, open-ended).
    valid_from: str = ""
    valid_to: str = ""


@dataclass(frozen=True)
class Placement:
    """Where a memory is written: the tenant (``a`` or ``b``), the namespace (``""``: the
    case's own; ``"other"``: a sibling), user, session, labels, and the key that writes."""

    tenant: str = "a"
    namespace: str = ""
    user: str = ""
    session: str = ""
    labels: tuple[str, ...] = ("team",)
    writer: str = "writer"

    @property
    def cell(self) -> tuple[str, str, str, str, tuple[str, ...]]:
        """What consolidation may not cross: tenant, namespace, user, session, label set."""
        return (self.tenant, self.namespace, self.user, self.session, tuple(sorted(self.labels)))


@dataclass(frozen=True)
class KeySpec:
    """A key the runner mints in each tenant: its confinement and labels."""

    user: str | None = None
    session: str | None = None
    labels: tuple[str, ...] = ("team", "ops")


# The writers. Every memory is written by one of them; the reviewers (two principals, so
# one can approve what the other proposed) are unconfined and hold every label.
KEYS: dict[str, KeySpec] = {
    "writer": KeySpec(),
    "alice": KeySpec(user="alice"),
    "bob": KeySpec(user="bob"),
    "s2": KeySpec(session="s2"),
    "ops": KeySpec(labels=("ops",)),
}
ALL_LABELS = ("team", "ops")


def reaches(newer: Placement, older: Placement) -> bool:
    """Whether every reader of ``older`` also sees ``newer``: the only pairs a supersede or
    merge may be proposed for."""
    return (
        newer.tenant == older.tenant
        and newer.namespace == older.namespace
        and newer.user in ("", older.user)
        and newer.session in ("", older.session)
        and set(newer.labels) >= set(older.labels)
    )


def sees(writer: Placement, row: Placement) -> bool:
    """Whether the key writing at ``writer`` (with its scope) can see a memory at ``row``."""
    key = KEYS[writer.writer]
    users = {u for u in (key.user, writer.user) if u}
    sessions = {s for s in (key.session, writer.session) if s}
    return (
        writer.tenant == row.tenant
        and writer.namespace == row.namespace
        and all(row.user in ("", u) for u in users)
        and all(row.session in ("", s) for s in sessions)
        and bool(set(key.labels) & set(row.labels))
    )


def may_write(at: Placement) -> bool:
    """Whether ``at.writer`` may write there: its confinement set in the scope, and only
    labels it holds."""
    key = KEYS.get(at.writer)
    return (
        key is not None
        and key.user in (None, at.user)
        and key.session in (None, at.session)
        and set(at.labels) <= set(key.labels)
    )


@dataclass(frozen=True)
class Case:
    id: str
    kind: str  # value_update, correction, slot, restatement, multi_valued, lookalike, ...
    family: str  # the attribute or relation it is written from
    variant: str  # "same", or how the pair is split (see generate.VARIANTS)
    expect: str  # supersede | merge | none
    rule: str  # the ConflictRule name without its prefix, or "" for none
    path: str  # how the newer becomes ACTIVE: save | update | approve
    older: Statement
    newer: Statement
    older_at: Placement = Placement()
    newer_at: Placement = Placement()
    # Unrelated statements saved first in the older's cell: any conflict with one is stray.
    fillers: tuple[str, ...] = ()
    note: str = ""  # the kind's sub-kind (e.g. a look-alike's "near_subject")
    must_not_propose: bool = False

    @property
    def conflict(self) -> bool:
        """A conflict by content, placed where it may be proposed."""
        return self.expect != "none" and not self.must_not_propose

    @property
    def writer_sees_older(self) -> bool:
        return sees(self.newer_at, self.older_at)


@dataclass(frozen=True)
class Member:
    text: str
    group: str  # the expected cluster ("" for a distractor); unique per cell
    at: Placement = Placement()


@dataclass(frozen=True)
class ConsolidationSet:
    id: str
    members: tuple[Member, ...]

    def groups(self) -> dict[str, list[int]]:
        """Expected clusters: member indexes per group of at least two."""
        found: dict[str, list[int]] = {}
        for i, m in enumerate(self.members):
            if m.group:
                found.setdefault(m.group, []).append(i)
        return {g: ix for g, ix in found.items() if len(ix) >= 2}


@dataclass(frozen=True)
class LabelledSet:
    split: str
    seed: int
    cases: tuple[Case, ...]
    consolidation: tuple[ConsolidationSet, ...] = field(default=())

    def limited(self, cases: int | None, sets: int | None) -> LabelledSet:
        """The first ``cases`` cases of each kind and variant, and the first ``sets`` sets
        (a small run that still has every kind in it)."""
        if cases is None and sets is None:
            return self
        kept: list[Case] = []
        seen: dict[tuple[str, str], int] = {}
        for c in self.cases:
            k = (c.kind, c.variant)
            if cases is None or seen.get(k, 0) < cases:
                kept.append(c)
                seen[k] = seen.get(k, 0) + 1
        chosen = self.consolidation if sets is None else self.consolidation[:sets]
        return LabelledSet(self.split, self.seed, tuple(kept), chosen)


def dump(labelled: LabelledSet, path: Path) -> None:
    path.write_text(json.dumps({"format": FORMAT, **asdict(labelled)}, indent=1) + "\n")


def load(path: Path) -> LabelledSet:
    """Read a set written by `dump`; ValueError naming the first thing wrong."""
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file (field 'format')")
        cases = tuple(_case(c) for c in data["cases"])
        sets = tuple(
            ConsolidationSet(
                s["id"],
                tuple(Member(m["text"], m["group"], _placement(m["at"])) for m in s["members"]),
            )
            for s in data.get("consolidation", ())
        )
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: malformed conflict set: {exc!r}") from exc
    for c in cases:
        check(c)
    for k in sets:
        check_set(k)
    return LabelledSet(str(data.get("split", path.stem)), int(data.get("seed", 0)), cases, sets)


def check(case: Case) -> None:
    """A case's labels agree with one another and with the wall rule."""
    if case.expect not in EXPECTS or case.path not in PATHS:
        raise ValueError(f"case {case.id}: expect/path must be one of {EXPECTS} / {PATHS}")
    if (case.expect == "none") != (case.rule == "") or (case.rule and case.rule not in RULES):
        raise ValueError(f"case {case.id}: rule {case.rule!r} does not fit expect {case.expect}")
    if case.must_not_propose != (not reaches(case.newer_at, case.older_at)):
        raise ValueError(f"case {case.id}: must_not_propose disagrees with its placements")
    if deduplicated(case.older.text, case.older_at, case.newer.text, case.newer_at):
        raise ValueError(f"case {case.id}: the newer would be saved as the older one")
    for at in (case.older_at, case.newer_at):
        if not may_write(at):
            raise ValueError(f"case {case.id}: writer {at.writer!r} cannot write there")


def check_set(s: ConsolidationSet) -> None:
    """Every member can be written where it is, and none would come back as another."""
    for i, m in enumerate(s.members):
        if not may_write(m.at):
            raise ValueError(f"set {s.id}: member {i}: writer {m.at.writer!r} cannot write there")
        for j, earlier in enumerate(s.members[:i]):
            if deduplicated(earlier.text, earlier.at, m.text, m.at):
                raise ValueError(f"set {s.id}: member {i} would be saved as member {j}")


def deduplicated(older: str, older_at: Placement, newer: str, newer_at: Placement) -> bool:
    """Whether saving ``newer`` would return the older memory instead (the server's
    deduplication: the same text in the same bucket, visible to the writer)."""
    return (
        older == newer
        and (older_at.tenant, older_at.namespace, older_at.user, older_at.session)
        == (newer_at.tenant, newer_at.namespace, newer_at.user, newer_at.session)
        and sees(newer_at, older_at)
    )


def _placement(d: dict[str, Any]) -> Placement:
    return Placement(**{**d, "labels": tuple(d.get("labels", ("team",)))})


def _statement(d: dict[str, Any]) -> Statement:
    facts = tuple(Fact(**f) for f in d.get("facts", ()))
    return Statement(d["text"], facts, d.get("valid_from", ""), d.get("valid_to", ""))


def _case(d: dict[str, Any]) -> Case:
    return Case(
        **{
            **d,
            "older": _statement(d["older"]),
            "newer": _statement(d["newer"]),
            "older_at": _placement(d["older_at"]),
            "newer_at": _placement(d["newer_at"]),
            "fillers": tuple(d.get("fillers", ())),
        }
    )
