"""The report: the figures of `score` as a table that can be read at a glance."""

from __future__ import annotations

from typing import Any

from brain.server.measure.conflicts.model import RULES


def ratio(r: dict[str, Any]) -> str:
    return f"{r['rate']:.3f} ({r['k']}/{r['n']})" if r["n"] else "- (0/0)"


def _short(r: dict[str, Any]) -> str:
    return f"{r['k']}/{r['n']}"


def _groups(groups: dict[str, dict[str, Any]]) -> str:
    return ", ".join(f"{k} {_short(v)}" for k, v in groups.items()) or "-"


def format_table(figures: dict[str, Any], heading: str) -> str:
    d, f, w = figures["detection"], figures["false_supersedes"], figures["walls"]
    c, e, r = figures["consolidation"], figures["erasure"], figures["reopen"]
    lines = [
        heading,
        f"{'detection':<22}{'precision':<18}{'recall':<18}agreement",
        f"{'  overall':<22}{ratio(d['precision']):<18}{ratio(d['recall']):<18}",
    ]
    for rule in RULES:
        x = d["rules"][rule]
        lines.append(
            f"  {rule:<20}{ratio(x['precision']):<18}{ratio(x['recall']):<18}"
            f"{ratio(x['agreement'])}"
        )
    false = ", ".join(f"{k} {v}" for k, v in sorted(d["false_detections"].items())) or "none"
    lines += [
        f"  recall by path: {_groups(d['recall_by_path'])}",
        f"  recall by placement: {_groups(d['recall_by_placement'])}",
        f"  recall by wording: {_groups(d['recall_by_wording'])}",
        f"  false detections: {false}",
        f"false supersedes (non-conflicts proposed): {ratio(f['rate'])}",
        f"  by kind: {_groups(f['by_kind'])}",
        f"  restatements proposed as supersedes: {ratio(f['restatements_as_supersede'])}",
        f"walls: cross-scope proposals {w['cross_scope_proposals']} (conflicts "
        f"{w['cross_scope_conflicts']}, clusters {w['cross_cell_clusters']}), leaks "
        f"{w['leaks']}, split pairs proposed {_short(w['must_not_propose_proposed'])}, "
        f"split pairs the writer sees reported NOTED {_short(w['noted'])}",
        f"  proposed by placement: {_groups(w['by_placement'])}",
        *[f"  leak: {x}" for x in w["leak_examples"]],
        f"search marks the older hit of an open conflict: {ratio(figures['search_marks'])}",
        f"approve a supersede, forget the newer: older superseded "
        f"{_short(r['superseded_on_approval'])}, back as a candidate "
        f"{_short(r['reopened_as_candidate'])} {r['after'] or ''}".rstrip(),
        f"consolidation: precision {ratio(c['precision'])} over {c['sets']} sets, groups "
        f"recovered {ratio(c['groups_recovered'])}, candidates superseding exactly their "
        f"sources {_short(c['candidates_supersede_their_sources'])}",
        f"erasure after forgetting a source: completeness {ratio(e['completeness'])}, sets "
        f"fully erased {_short(e['sets_fully_erased'])} ({_groups(e['checks'])})",
        *[f"  text left: {x}" for x in e["leftovers"][:10]],
    ]
    if figures["unavailable"]:
        lines.append(
            "not measured, the server answered UNIMPLEMENTED: " + ", ".join(figures["unavailable"])
        )
    lines += [f"error: {x}" for x in figures["errors"][:10]]
    if len(figures["errors"]) > 10:
        lines.append(f"... and {len(figures['errors']) - 10} more errors")
    return "\n".join(lines)
