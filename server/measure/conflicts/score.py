"""The figures, computed from the labelled set and the trace of what the server answered.

Detection is scored on the cases whose pair may be proposed (one cell, or the newer wider
than the older), in their consolidation-free namespaces. A detection is a pair of memories
a response or a listing named (the proposer's own NOTED answer to ProposeMemory aside: that
memory is not ACTIVE yet), with the action its rule stands for: RESTATEMENT merges, the
other rules supersede. It is right when it names a labelled pair, newer over older, with
the labelled action; anything else (a non-conflict, a wrong action, the pair reversed, a
filler) is a false detection.

- precision / recall, overall and per rule (a rule's precision: its detections that are
  right; its recall: the pairs labelled with it found with the right action, whatever rule
  the server named; ``agreement``: found with that very rule);
- the false-supersede rate: non-conflicts (``expect`` none) that got a proposal (a
  recorded conflict, any rule, either way round);
- the walls: recorded conflicts whose newer memory does not reach every reader of the older
  one, or that join tenants or memories the run never wrote (``cross_scope``, must be 0),
  the labelled must-not-propose pairs among them, and the ids a response named that its
  writer cannot read (``leaks``, must be 0); ``noted``: split pairs reported NOTED;
- consolidation precision: the proposed clusters whose sources are one labelled group in
  one cell, over all clusters; ``groups_recovered``: labelled groups proposed exactly;
- erasure completeness: the checks passed after forgetting a source (see `checks`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from brain.server.measure.conflicts.model import RULES, Case, LabelledSet, reaches
from brain.server.measure.conflicts.trace import Seen, Trace, Where


@dataclass(frozen=True)
class Ratio:
    k: int
    n: int

    @property
    def rate(self) -> float | None:
        return round(self.k / self.n, 3) if self.n else None

    def as_json(self) -> dict[str, Any]:
        return {"rate": self.rate, "k": self.k, "n": self.n}

    def __str__(self) -> str:
        return f"{self.rate:.3f} ({self.k}/{self.n})" if self.n else "- (0/0)"


def _ratio(flags: Iterable[bool]) -> Ratio:
    values = list(flags)
    return Ratio(sum(values), len(values))


def _walled(w: Where) -> Where:
    return replace(w, at=replace(w.at, namespace=w.namespace))


def crosses(seen: Seen, written: dict[str, Where]) -> bool:
    """A recorded conflict that breaks a wall: an id the run never wrote, two tenants, or a
    newer memory that does not reach every reader of the older one."""
    newer, older = written.get(seen.newer_id), written.get(seen.older_id)
    if newer is None or older is None or {newer.tenant, older.tenant} != {seen.tenant}:
        return True
    return not reaches(_walled(newer).at, _walled(older).at)


def action(rule: str) -> str:
    return "merge" if rule == "RESTATEMENT" else "supersede"


def score(labelled: LabelledSet, trace: Trace) -> dict[str, Any]:
    """Every figure of the report, as one JSON-ready dict."""
    cases = {c.id: c for c in labelled.cases if c.id in trace.pairs}
    in_scope = [c for c in cases.values() if not c.must_not_propose]
    return {
        "cases": {"labelled": len(labelled.cases), "written": len(cases)},
        "detection": _detection(cases, in_scope, trace),
        "false_supersedes": _false_supersedes(in_scope, trace),
        "walls": _walls(cases, trace),
        "search_marks": _ratio(trace.marks.values()).as_json(),
        "reopen": _reopen(trace),
        "consolidation": _consolidation(labelled, trace),
        "erasure": _erasure(trace),
        "unavailable": sorted(trace.unavailable),
        "errors": trace.errors,
    }


def _detection(cases: dict[str, Case], in_scope: list[Case], trace: Trace) -> dict[str, Any]:
    written, pairs = trace.written, trace.pairs
    pair_case = {pair: cid for cid, pair in pairs.items()}

    def scored(memory_id: str) -> bool:
        w = written.get(memory_id)
        return w is not None and w.owner in cases and not cases[w.owner].must_not_propose

    rules_of: dict[tuple[str, str], set[str]] = {}
    for s in trace.seen:
        if s.source != "propose" and scored(s.older_id) and scored(s.newer_id):
            rules_of.setdefault((s.older_id, s.newer_id), set()).add(s.rule)

    def right(pair: tuple[str, str], rule: str) -> bool:
        cid = pair_case.get(pair)
        return cid is not None and cases[cid].expect == action(rule)

    false: Counter[str] = Counter()
    per_rule: dict[str, list[bool]] = {r: [] for r in RULES}
    pair_right = []
    for pair, rules in rules_of.items():
        for rule in rules:
            per_rule.setdefault(rule, []).append(right(pair, rule))
        ok = any(right(pair, r) for r in rules)
        pair_right.append(ok)
        if not ok:
            false[_why(pair, pair_case, cases, written)] += 1

    positives = [c for c in in_scope if c.expect != "none"]

    def found(c: Case, rule: str | None = None) -> bool:
        return any(
            action(r) == c.expect and rule in (None, r) for r in rules_of.get(pairs[c.id], ())
        )

    by_rule: dict[str, dict[str, Any]] = {}
    for rule in RULES:
        labelled = [c for c in positives if c.rule == rule]
        by_rule[rule] = {
            "precision": _ratio(per_rule[rule]).as_json(),
            "recall": _ratio(found(c) for c in labelled).as_json(),
            "agreement": _ratio(found(c, rule) for c in labelled).as_json(),
        }
    return {
        "precision": _ratio(pair_right).as_json(),
        "recall": _ratio(found(c) for c in positives).as_json(),
        "rules": by_rule,
        "recall_by_path": _grouped(positives, lambda c: c.path, found),
        "recall_by_placement": _grouped(positives, lambda c: c.variant, found),
        "recall_by_wording": _grouped(positives, _kind, found),
        "false_detections": dict(false),
    }


def _why(
    pair: tuple[str, str], pair_case: dict[tuple[str, str], str], cases: dict[str, Case],
    written: dict[str, Where],
) -> str:  # fmt: skip
    """What a false detection was: a labelled pair's kind, a reversed pair, a filler."""
    cid = pair_case.get(pair)
    if cid is not None:
        c = cases[cid]
        return _kind(c)
    if (pair[1], pair[0]) in pair_case:
        return "reversed"
    roles = {written[pair[0]].role, written[pair[1]].role}
    return "filler" if roles & {"filler", "placeholder"} else "other"


def _kind(c: Case) -> str:
    return f"{c.kind}:{c.note}" if c.note else c.kind


def _grouped(cases: list[Case], key: Any, found: Any) -> dict[str, Any]:
    groups: dict[str, list[bool]] = {}
    for c in cases:
        groups.setdefault(key(c), []).append(found(c))
    return {k: _ratio(v).as_json() for k, v in sorted(groups.items())}


def _proposed(c: Case, trace: Trace) -> bool:
    """A recorded conflict names the pair, either way round."""
    older, newer = trace.pairs[c.id]
    return any(s.recorded and {s.older_id, s.newer_id} == {older, newer} for s in trace.seen)


def _false_supersedes(in_scope: list[Case], trace: Trace) -> dict[str, Any]:
    negatives = [c for c in in_scope if c.expect == "none"]
    merges = [c for c in in_scope if c.expect == "merge"]

    def as_supersede(c: Case) -> bool:
        older, newer = trace.pairs[c.id]
        return any(
            s.recorded and s.action == "supersede" and {s.older_id, s.newer_id} == {older, newer}
            for s in trace.seen
        )

    return {
        "rate": _ratio(_proposed(c, trace) for c in negatives).as_json(),
        "by_kind": _grouped(negatives, _kind, lambda c: _proposed(c, trace)),
        "restatements_as_supersede": _ratio(as_supersede(c) for c in merges).as_json(),
    }


def _walls(cases: dict[str, Case], trace: Trace) -> dict[str, Any]:
    crossing = {
        (s.older_id, s.newer_id) for s in trace.seen if s.recorded and crosses(s, trace.written)
    }
    cells = [c for c in trace.clusters if not c.in_cell]
    split = [c for c in cases.values() if c.must_not_propose]
    visible = [c for c in split if c.writer_sees_older]

    def noted(c: Case) -> bool:
        older, newer = trace.pairs[c.id]
        return any(s.older_id == older and s.newer_id == newer for s in trace.seen)

    return {
        "cross_scope_proposals": len(crossing) + len(cells),
        "cross_scope_conflicts": len(crossing),
        "cross_cell_clusters": len(cells),
        "must_not_propose_proposed": _ratio(_proposed(c, trace) for c in split).as_json(),
        "by_placement": _grouped(split, lambda c: c.variant, lambda c: _proposed(c, trace)),
        "leaks": len(trace.leaks),
        "leak_examples": trace.leaks[:5],
        "noted": _ratio(noted(c) for c in visible).as_json(),
    }


def _reopen(trace: Trace) -> dict[str, Any]:
    found = list(trace.reopens.values())
    return {
        "superseded_on_approval": _ratio(first == "SUPERSEDED" for first, _ in found).as_json(),
        "reopened_as_candidate": _ratio(after == "CANDIDATE" for _, after in found).as_json(),
        "after": dict(Counter(after for _, after in found)),
    }


def _consolidation(labelled: LabelledSet, trace: Trace) -> dict[str, Any]:
    sets = {s.id: s for s in labelled.consolidation if s.id in trace.consolidated_sets}
    pure, recovered = [], []
    for c in trace.clusters:
        if c.set_id not in sets:
            continue
        groups = {sets[c.set_id].members[i].group if i >= 0 else "?" for i in c.sources}
        pure.append(c.in_cell and len(groups) == 1 and not groups & {"", "?"})
    for set_id, s in sets.items():
        proposed = {frozenset(c.sources) for c in trace.clusters if c.set_id == set_id}
        recovered += [frozenset(ix) in proposed for ix in s.groups().values()]
    return {
        "sets": len(sets),
        "clusters": len(trace.clusters),
        "precision": _ratio(pure).as_json(),
        "groups_recovered": _ratio(recovered).as_json(),
        "candidates_supersede_their_sources": _ratio(
            c.supersedes_sources for c in trace.clusters if c.candidate_id
        ).as_json(),
    }


def _erasure(trace: Trace) -> dict[str, Any]:
    checks: dict[str, list[bool]] = {}
    for e in trace.erasures:
        for name, ok in e.checks.items():
            checks.setdefault(name, []).append(ok)
    return {
        "completeness": _ratio(ok for e in trace.erasures for ok in e.checks.values()).as_json(),
        "sets_fully_erased": _ratio(all(e.checks.values()) for e in trace.erasures).as_json(),
        "checks": {k: _ratio(v).as_json() for k, v in sorted(checks.items())},
        "leftovers": [
            f"{e.set_id} ({'approved' if e.approved else 'pending'}, forgot the "
            f"{'chosen' if e.forgot_chosen else 'other'} source): {x}"
            for e in trace.erasures
            for x in e.leftovers
        ],
    }
