"""The labelled set, generated: each split from its own bank with one fixed seed.

Per split (the counts are `COUNTS`): in one cell (same namespace, user, session, labels)
value updates, corrections, single-valued graph slots and restatements, which should be
found, and additions to multi-valued attributes (plain, and with "also" or "now also"),
look-alikes (another subject of the same attribute: any, one with the same value, one that
differs by a word), multi-valued graph relations and relations of the past, which should
not. Then value updates, corrections and restatements split across a wall (`VARIANTS`):
another user, session, label set, namespace or tenant, narrower or wider than the older
one. Only the wider ones may be proposed. Last, `CONSOLIDATION_SETS` namespaces of
restatement groups for ConsolidateMemories.

The same seed gives the same set, byte for byte (tests/test_conflicts_eval.py checks it).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from brain.server.measure.conflicts import dev_bank, heldout_bank
from brain.server.measure.conflicts.model import (
    Case,
    ConsolidationSet,
    Fact,
    LabelledSet,
    Member,
    Placement,
    Statement,
    reaches,
)
from brain.server.measure.conflicts.vocabulary import (
    Attribute,
    Bank,
    MultiAttribute,
    Relation,
    fill,
)

SEED = 30
SPLITS: dict[str, Bank] = {"dev": dev_bank.BANK, "heldout": heldout_bank.BANK}

# Cases per kind in one cell: (kind, count, expect, rule).
COUNTS: tuple[tuple[str, int, str, str], ...] = (
    ("value_update", 60, "supersede", "VALUE_UPDATE"),
    ("correction", 44, "supersede", "CORRECTION"),
    ("slot", 24, "supersede", "SLOT"),
    ("restatement", 44, "merge", "RESTATEMENT"),
    ("multi_valued", 44, "none", ""),
    ("lookalike", 48, "none", ""),
    ("many_valued", 12, "none", ""),
    ("historical", 12, "none", ""),
)
LOOKALIKES = ("other_subject", "same_value", "near_subject")
# How the newer memory becomes ACTIVE, for cases in one cell (weights).
PATH_NAMES, PATH_SHARES = ("save", "update", "approve"), (70, 15, 15)

P = Placement
SAME = Placement()
BOTH = ("team", "ops")
# Where the older and the newer memory of a split pair are written. The wider ones reach
# every reader of the older and may be proposed; the others must never be.
VARIANTS: dict[str, tuple[Placement, Placement]] = {
    "wider_user": (P(user="alice"), P()),
    "wider_session": (P(session="s1"), P()),
    "wider_labels": (P(), P(labels=BOTH)),
    "narrower_user": (P(), P(user="alice")),
    "other_user": (P(user="alice"), P(user="bob")),
    "other_user_confined": (P(user="alice", writer="alice"), P(user="bob", writer="bob")),
    "narrower_session": (P(), P(session="s1")),
    "other_session": (P(session="s1"), P(session="s2")),
    "session_confined": (P(session="s1"), P(session="s2", writer="s2")),
    "other_labels": (P(), P(labels=("ops",))),
    "narrower_labels": (P(labels=BOTH), P()),
    "label_confined": (P(), P(labels=("ops",), writer="ops")),
    "other_namespace": (P(), P(namespace="other")),
    "other_tenant": (P(), P(tenant="b")),
}
PER_VARIANT = 5
SPLIT_KINDS = ("value_update", "correction", "restatement")
CONSOLIDATION_SETS = 8


def generate(split: str, seed: int = SEED) -> LabelledSet:
    """The labelled set of ``split`` (``dev`` or ``heldout``)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; one of {', '.join(SPLITS)}")
    return _Generator(SPLITS[split], random.Random(f"{seed}:{split}"), split, seed).run()


class _Generator:
    def __init__(self, bank: Bank, rng: random.Random, split: str, seed: int) -> None:
        self.bank, self.rng, self.split, self.seed = bank, rng, split, seed
        self.cases: list[Case] = []

    def run(self) -> LabelledSet:
        labels = {kind: (expect, rule) for kind, _, expect, rule in COUNTS}
        for kind, count, expect, rule in COUNTS:
            for i in range(count):
                family, older, newer, note, subjects = self.pair(kind, i)
                path = self.rng.choices(PATH_NAMES, PATH_SHARES)[0]
                self.add(kind, family, "same", expect, rule, path, older, newer, note,
                         fillers=self.fillers(family, subjects))  # fmt: skip
        for v, (variant, (older_at, newer_at)) in enumerate(VARIANTS.items()):
            for i in range(PER_VARIANT):
                kind = SPLIT_KINDS[i % len(SPLIT_KINDS)]
                family, older, newer, note, _ = self.pair(kind, v * PER_VARIANT + i)
                expect, rule = labels[kind]
                self.add(kind, family, variant, expect, rule, "save", older, newer, note,
                         older_at=older_at, newer_at=newer_at)  # fmt: skip
        sets = tuple(self.consolidation(i) for i in range(CONSOLIDATION_SETS))
        return LabelledSet(self.split, self.seed, tuple(self.cases), sets)

    def add(
        self, kind: str, family: str, variant: str, expect: str, rule: str, path: str,
        older: Statement, newer: Statement, note: str, fillers: tuple[str, ...] = (),
        older_at: Placement = SAME, newer_at: Placement = SAME,
    ) -> None:  # fmt: skip
        self.cases.append(
            Case(
                id=f"{self.split}-{len(self.cases):04d}", kind=kind, family=family,
                variant=variant, expect=expect, rule=rule, path=path, older=older,
                newer=newer, older_at=older_at, newer_at=newer_at, fillers=fillers, note=note,
                must_not_propose=not reaches(newer_at, older_at),
            )
        )  # fmt: skip

    # -- pairs ---------------------------------------------------------------------------

    def pair(self, kind: str, i: int) -> tuple[str, Statement, Statement, str, set[str]]:
        """(family, older, newer, note, subjects written about) for one case of ``kind``."""
        b = self.bank
        if kind in ("value_update", "correction", "lookalike"):
            attr = b.attributes[i % len(b.attributes)]
            make = {"value_update": self.update, "correction": self.correction}
            if kind == "lookalike":
                return self.lookalike(attr, LOOKALIKES[i % len(LOOKALIKES)])
            return make[kind](attr)
        if kind == "restatement":
            if i % 5 == 4:  # every fifth about a multi-valued attribute
                return self.restatement(b.multi[i % len(b.multi)])
            return self.restatement(b.attributes[i % len(b.attributes)])
        if kind == "multi_valued":
            # A third of each family's additions plain ("speaks German"), the rest marked.
            return self.addition(b.multi[i % len(b.multi)], plain=(i // len(b.multi)) % 3 == 0)
        if kind in ("slot", "many_valued"):
            relations = b.slots if kind == "slot" else b.many
            return self.relation(relations[i % len(relations)])
        if kind == "historical":
            return self.historical(b.slots[i % len(b.slots)])
        raise ValueError(f"unknown kind {kind!r}")

    def update(self, attr: Attribute) -> tuple[str, Statement, Statement, str, set[str]]:
        s = self.rng.choice(attr.subjects)
        old, new = self.rng.sample(attr.values_for(s), 2)
        first = self.rng.choice(attr.state)
        same = self.rng.random() < 0.6
        second = first if same else self.rng.choice([t for t in attr.state if t != first])
        note = "same_wording" if same else "other_wording"
        return attr.name, _st(fill(first, s, old)), _st(fill(second, s, new)), note, {s}

    def correction(self, attr: Attribute) -> tuple[str, Statement, Statement, str, set[str]]:
        s = self.rng.choice(attr.subjects)
        old, new = self.rng.sample(attr.values_for(s), 2)
        older = fill(self.rng.choice(attr.state), s, old)
        newer = fill(self.rng.choice(attr.correction), s, new, old=old)
        return attr.name, _st(older), _st(newer), "", {s}

    def restatement(
        self, attr: Attribute | MultiAttribute
    ) -> tuple[str, Statement, Statement, str, set[str]]:
        s = self.rng.choice(attr.subjects)
        v = self.rng.choice(attr.values_for(s) if isinstance(attr, Attribute) else attr.values)
        pair = [
            fill(self.rng.choice(attr.state), s, v),
            fill(self.rng.choice(attr.paraphrase), s, v),
        ]
        if self.rng.random() < 0.3:
            pair.reverse()
        note = "multi_valued" if isinstance(attr, MultiAttribute) else "single_valued"
        return attr.name, _st(pair[0]), _st(pair[1]), note, {s}

    def addition(
        self, attr: MultiAttribute, plain: bool
    ) -> tuple[str, Statement, Statement, str, set[str]]:
        s = self.rng.choice(attr.subjects)
        first, second = self.rng.sample(attr.values, 2)
        older = fill(self.rng.choice(attr.state), s, first)
        newer = fill(self.rng.choice(attr.state if plain else attr.addition), s, second)
        return attr.name, _st(older), _st(newer), "plain" if plain else "addition", {s}

    def lookalike(
        self, attr: Attribute, note: str
    ) -> tuple[str, Statement, Statement, str, set[str]]:
        rng = self.rng
        groups = [g for g in attr.near if len(g) >= 2]
        if note == "near_subject" and groups:
            s1, s2 = rng.sample(rng.choice(groups), 2)
        else:
            note = "other_subject" if note == "near_subject" else note
            s1, s2 = rng.sample(attr.subjects, 2)
        v1 = rng.choice(attr.values_for(s1))
        shared = [v for v in attr.values_for(s2) if v == v1]
        if note == "same_value" and shared:
            v2 = v1
        else:
            v2 = rng.choice([v for v in attr.values_for(s2) if v != v1])
        first = rng.choice(attr.state)
        second = first if rng.random() < 0.7 else rng.choice(attr.state)
        return attr.name, _st(fill(first, s1, v1)), _st(fill(second, s2, v2)), note, {s1, s2}

    def relation(self, rel: Relation) -> tuple[str, Statement, Statement, str, set[str]]:
        s = self.rng.choice(rel.subjects)
        o1, o2 = self.rng.sample([o for o in rel.objects if o != s], 2)
        t1, t2 = self.rng.sample(rel.texts, 2)
        return rel.name, self.asserting(rel, t1, s, o1), self.asserting(rel, t2, s, o2), "", {s}

    def historical(self, rel: Relation) -> tuple[str, Statement, Statement, str, set[str]]:
        s = self.rng.choice(rel.subjects)
        o1, o2 = self.rng.sample([o for o in rel.objects if o != s], 2)
        until = self.rng.randint(2016, 2021)
        since = until + self.rng.randint(2, 4)
        older = self.asserting(
            rel, self.rng.choice(rel.past), s, o1, str(until),
            start=f"{until - 4}-01-01", end=f"{until}-06-30",
        )  # fmt: skip
        newer = self.asserting(
            rel, self.rng.choice(rel.since), s, o2, str(since), start=f"{since}-01-01"
        )
        return rel.name, older, newer, "", {s}

    def asserting(
        self, rel: Relation, template: str, s: str, o: str, year: str = "",
        start: str = "", end: str = "",
    ) -> Statement:  # fmt: skip
        fact = Fact(s, rel.predicate, o, rel.single_valued, rel.subject_type, rel.object_type,
                    start, end)  # fmt: skip
        return Statement(fill(template, s, o, year=year), (fact,), start, end)

    def fillers(self, family: str, subjects: set[str]) -> tuple[str, ...]:
        """Two unrelated statements (other families, other subjects) for the older's cell."""
        every: list[Attribute | MultiAttribute] = [*self.bank.attributes, *self.bank.multi]
        pool = [a for a in every if a.name != family]
        texts = []
        for attr in self.rng.sample(pool, 2):
            s = self.rng.choice([x for x in attr.subjects if x.split("|")[0] not in subjects])
            values = attr.values_for(s) if isinstance(attr, Attribute) else attr.values
            texts.append(fill(self.rng.choice(attr.state), s, self.rng.choice(values)))
        return tuple(texts)

    # -- consolidation -------------------------------------------------------------------

    def consolidation(self, n: int) -> ConsolidationSet:
        """Three groups of restatements in the main cell, copies of the first (the same
        words) in a user's cell and in another label set, and two distractors."""
        rng = self.rng
        attrs = rng.sample(list(self.bank.attributes), 3)
        members: list[Member] = []
        first: list[str] = []
        for j, attr in enumerate(attrs):
            s = rng.choice(attr.subjects)
            v = rng.choice(attr.values_for(s))
            templates = rng.sample([*attr.state, *attr.paraphrase], 3)
            texts = [fill(t, s, v) for t in templates]
            members += [Member(t, f"g{j}") for t in texts]
            if j == 0:
                first = texts[:2]
            if j == 1:  # a look-alike of this group: another subject, another value
                other = rng.choice([x for x in attr.subjects if x != s])
                value = rng.choice([x for x in attr.values_for(other) if x != v])
                members.append(Member(fill(templates[0], other, value), ""))
        multi = rng.choice(self.bank.multi)
        s = rng.choice(multi.subjects)
        members.append(Member(fill(multi.state[0], s, rng.choice(multi.values)), ""))
        rng.shuffle(members)
        # The copies come after the originals; the label copies are written by a key that
        # holds only "ops" and so cannot see the originals: the same words are saved anew
        # (a writer that saw both would get the original back, deduplicated).
        members += [Member(t, "g0@alice", P(user="alice")) for t in first]
        members += [Member(t, "g0@ops", P(labels=("ops",), writer="ops")) for t in first]
        return ConsolidationSet(f"{self.split}-k{n}", tuple(members))


def _st(text: str) -> Statement:
    return Statement(text)


def combined(splits: Sequence[str], seed: int = SEED) -> LabelledSet:
    """Several splits as one set (``--split all``)."""
    parts = [generate(s, seed) for s in splits]
    return LabelledSet(
        "+".join(splits), seed,
        tuple(c for p in parts for c in p.cases),
        tuple(k for p in parts for k in p.consolidation),
    )  # fmt: skip
