"""What the labelled conflict set is written from: families of statements, as templates.

A `Bank` holds one split's families; the dev bank (`dev_bank`) and the held-out bank
(`heldout_bank`) share no template, subject or value list, so tuning on one is checked on
the other. Templates are ``str.format`` strings over these fields:

- ``{S}`` the subject, capitalised (sentence start), ``{s}`` the subject as written;
- ``{V}`` the value the statement gives, ``{O}`` the value it replaces (corrections);
- ``{L}`` a fixed qualifier of the subject (``the ingestion service|Python``: ``{L}`` is
  Python), ``{Y}`` a year (statements about the past).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Attribute:
    """A single-valued attribute: a subject has one value at a time (a port, a date, a lead).

    ``state`` says the value plainly; ``paraphrase`` says the same in other words (a
    restatement); ``correction`` replaces ``{O}`` with ``{V}`` in correction language.
    ``near`` groups subjects that share words (``the staging database`` / ``the production
    database``): the hardest look-alikes are drawn within a group.
    """

    name: str
    value_kind: str  # number, time, date, version, amount, name, place
    subjects: tuple[str, ...]
    values: tuple[str, ...]
    state: tuple[str, ...]
    paraphrase: tuple[str, ...]
    correction: tuple[str, ...]
    near: tuple[tuple[str, ...], ...] = ()
    # Values per qualifier (``Python`` -> 3.11, 3.12), where ``values`` would not fit all.
    qualified: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def values_for(self, subject: str) -> tuple[str, ...]:
        qualifier = subject.partition("|")[2]
        return dict(self.qualified).get(qualifier, self.values)


@dataclass(frozen=True)
class MultiAttribute:
    """A multi-valued attribute: a new value adds to the old ones (languages, tools)."""

    name: str
    subjects: tuple[str, ...]
    values: tuple[str, ...]
    state: tuple[str, ...]
    # A second value, added: never a conflict, even with "now" in it.
    addition: tuple[str, ...]
    # The same value in other words: a restatement.
    paraphrase: tuple[str, ...]


@dataclass(frozen=True)
class Relation:
    """A graph relation asserted with each statement (``subject -predicate-> object``).

    ``texts`` are deliberately unlike one another, so that a pair drawn from two of them
    shares the subject and little else: what finds it is the graph, not the wording.
    ``past`` and ``since`` say the relation held until / from a year (``{Y}``).
    """

    name: str
    predicate: str
    single_valued: bool
    subject_type: str
    object_type: str
    subjects: tuple[str, ...]
    objects: tuple[str, ...]
    texts: tuple[str, ...]
    past: tuple[str, ...] = ()
    since: tuple[str, ...] = ()


@dataclass(frozen=True)
class Bank:
    name: str
    attributes: tuple[Attribute, ...]
    multi: tuple[MultiAttribute, ...]
    slots: tuple[Relation, ...]  # single-valued relations
    many: tuple[Relation, ...]  # multi-valued relations

    def subjects(self) -> set[str]:
        """Every subject and object the bank writes about (for the disjointness check)."""
        found: set[str] = set()
        for a in self.attributes:
            found.update(s.split("|")[0] for s in a.subjects)
        for m in self.multi:
            found.update(m.subjects)
        for r in (*self.slots, *self.many):
            found.update(r.subjects)
        return found

    def templates(self) -> set[str]:
        found: set[str] = set()
        for a in self.attributes:
            found.update((*a.state, *a.paraphrase, *a.correction))
        for m in self.multi:
            found.update((*m.state, *m.addition, *m.paraphrase))
        for r in (*self.slots, *self.many):
            found.update((*r.texts, *r.past, *r.since))
        return found


def fill(template: str, subject: str, value: str, old: str = "", year: str = "") -> str:
    """The template with its fields filled in; ``subject`` may carry ``|qualifier``."""
    s, _, qualifier = subject.partition("|")
    capital = s[:1].upper() + s[1:]
    text = template.format(S=capital, s=s, V=value, O=old, L=qualifier, Y=year)
    if text.startswith(("the ", "our ")):  # a value at the start ("{V} hosts {s}")
        text = text[:1].upper() + text[1:]
    return text
