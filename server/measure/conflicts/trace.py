"""What the server answered during a run, as plain records: the scoring reads only these.

`Trace` holds every memory the run wrote (`Where`), each case's pair of ids, every
conflict seen in a write's response or in a listing (`Seen`), and the results of the
checks that follow (search marks, reopening, consolidation clusters, erasure).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from brain.server.measure.conflicts.model import Placement
from brain.v1 import common_pb2

SUPERSEDE_RULES = frozenset({"VALUE_UPDATE", "CORRECTION", "SLOT"})
# States of a conflict that was recorded (has an id): a proposal, or its outcome.
RECORDED = frozenset({"OPEN", "RESOLVED", "DISMISSED", "APPLIED"})


def rule_name(value: common_pb2.ConflictRule.ValueType) -> str:
    return common_pb2.ConflictRule.Name(value).removeprefix("CONFLICT_RULE_")


def state_name(value: common_pb2.ConflictState.ValueType) -> str:
    return common_pb2.ConflictState.Name(value).removeprefix("CONFLICT_STATE_")


@dataclass(frozen=True)
class Seen:
    """One conflict as the server reported it, and where."""

    source: str  # save, update, propose, approve (a write's response) or list
    tenant: str
    id: str
    newer_id: str
    older_id: str
    rule: str  # VALUE_UPDATE, CORRECTION, SLOT, RESTATEMENT (or UNSPECIFIED)
    state: str  # OPEN, NOTED, ...
    overlap: float = 0.0
    semantic: float = 0.0
    detail: str = ""

    @classmethod
    def of(cls, c: common_pb2.Conflict, source: str, tenant: str) -> Seen:
        return cls(
            source, tenant, c.id, c.newer_id, c.older_id, rule_name(c.rule),
            state_name(c.state), round(c.overlap, 3), round(c.semantic_similarity, 3), c.detail,
        )  # fmt: skip

    @property
    def recorded(self) -> bool:
        """A proposal was made (or decided): the walls must hold for it."""
        return bool(self.id) or self.state in RECORDED

    @property
    def action(self) -> str:
        return "merge" if self.rule == "RESTATEMENT" else "supersede"


@dataclass(frozen=True)
class Where:
    """A memory the run wrote: its tenant, owner (case or set id), role and placement."""

    tenant: str
    owner: str
    role: str  # older, newer, filler, placeholder, member:<index>
    at: Placement
    namespace: str


@dataclass(frozen=True)
class Cluster:
    """One consolidation the server proposed, in the labelled set's terms."""

    set_id: str
    sources: tuple[int, ...]  # member indexes; -1 for an id the run never wrote
    candidate_id: str
    text: str  # the candidate's content as proposed
    chosen: int  # member index of chosen_id, -1 if none
    # The candidate lives in its sources' cell (namespace, user, session, labels).
    in_cell: bool
    # The candidate names exactly its sources in `supersedes`.
    supersedes_sources: bool = True


@dataclass(frozen=True)
class Erasure:
    """Forgetting one source of an (approved or pending) consolidation, and what remained."""

    set_id: str
    approved: bool
    forgot_chosen: bool
    checks: dict[str, bool]
    # Where the consolidated text was still found ("export: consolidated v2 SUPERSEDED").
    leftovers: tuple[str, ...] = ()


@dataclass
class Trace:
    written: dict[str, Where] = field(default_factory=dict)
    pairs: dict[str, tuple[str, str]] = field(default_factory=dict)  # case -> (older, newer)
    seen: list[Seen] = field(default_factory=list)
    # A write's response named a memory its writer cannot see (or the run never wrote).
    leaks: list[str] = field(default_factory=list)
    unavailable: set[str] = field(default_factory=set)  # RPCs that answered UNIMPLEMENTED
    errors: list[str] = field(default_factory=list)
    marks: dict[str, bool] = field(default_factory=dict)  # case -> older hit marked
    # case -> (older's status once the conflict is approved, then once the newer is forgotten)
    reopens: dict[str, tuple[str, str]] = field(default_factory=dict)
    clusters: list[Cluster] = field(default_factory=list)
    consolidated_sets: list[str] = field(default_factory=list)
    erasures: list[Erasure] = field(default_factory=list)


def naming(seen: list[Seen], older: str, newer: str) -> list[Seen]:
    """The conflicts that name this pair, in its order (newer over older)."""
    return [s for s in seen if s.older_id == older and s.newer_id == newer]
