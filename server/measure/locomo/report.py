"""The result of a LoCoMo run: `EvalResult`, its JSON object, and the table a terminal shows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from brain.server.measure.locomo.data import CATEGORIES
from brain.server.measure.locomo.folds import CrossValidation, LearnedFusion
from brain.server.measure.locomo.scoring import KS, Lifecycle, Metrics, Silence
from brain.server.measure.stats import percentile


@dataclass(frozen=True)
class EvalResult:
    overall: Metrics  # with the parameters the server runs with
    per_category: dict[int, Metrics]
    search_ms: list[float]
    turns: int
    conversations: int
    embedder: str
    load_seconds: float
    k: int
    silence: Silence = field(default_factory=Silence)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    cross_validation: CrossValidation | None = None
    # How the server ordered the scored searches: ranking name -> count. A reranker that
    # failed shows up here as RANKING_FUSED_RERANKER_UNAVAILABLE, not as a lower figure.
    rankings: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.overall.as_json())
        out.update(
            search_p50_ms=round(percentile(self.search_ms, 50), 2),
            search_p95_ms=round(percentile(self.search_ms, 95), 2),
            turns=self.turns,
            conversations=self.conversations,
            embedder=self.embedder,
            load_seconds=round(self.load_seconds, 2),
            k=self.k,
            per_category={
                str(c): {"name": CATEGORIES[c], **m.as_json()}
                for c, m in sorted(self.per_category.items())
            },
            silence=self.silence.as_json(),
            lifecycle=self.lifecycle.as_json(),
            rankings=dict(sorted(self.rankings.items())),
        )
        if self.cross_validation is not None:
            out["cross_validated"] = self.cross_validation.as_json()
        return out


def format_table(result: EvalResult) -> str:
    """The report as a plain-text table for a terminal."""
    heads = [f"R@{k}" for k in KS] + [f"H@{k}" for k in KS] + ["MRR"]
    lines = [
        f"LoCoMo retrieval: {result.conversations} conversation(s), {result.turns} turns, "
        f"{result.overall.questions} questions, embedder {result.embedder}, k={result.k}",
        "",
        f"{'category':<16}{'questions':>10}" + "".join(f"{h:>7}" for h in heads),
    ]

    def row(label: str, m: Metrics) -> str:
        values = [*m.recall.values(), *m.hit.values(), m.mrr]
        return f"{label:<16}{m.questions:>10}" + "".join(f"{v:>7.3f}" for v in values)

    for c, m in sorted(result.per_category.items()):
        lines.append(row(f"{c} {CATEGORIES[c]}", m))
    lines.append(row("all", result.overall))
    cv = result.cross_validation
    if cv is not None:
        lines += ["", f"cross-validated (leave one conversation out, {cv.candidates} candidates):"]
        for c, m in sorted(cv.per_category.items()):
            lines.append(row(f"{c} {CATEGORIES[c]}", m))
        lines.append(row("all, held out", cv.overall))
        lines.append(row("all, in sample", cv.in_sample))
        lines += [f"  held out {sample}: chose {chosen}" for sample, chosen in cv.chosen]
        lines.append(f"  in sample: chose {cv.in_sample_candidate}")
        if cv.learned is not None:
            lines += _learned_lines(cv.learned, row)
    silence, life = result.silence, result.lifecycle
    lines += [
        "",
        f"silent (no hit) when it should be: adversarial {silence.adversarial_silent}/"
        f"{silence.adversarial_asked}, never said {silence.never_said_silent}/"
        f"{silence.never_said_asked}",
        f"lifecycle: {life.superseded} superseded, {life.forgotten} forgotten, asked again "
        f"{life.searches} times: {life.leaked} came back (must be 0); replacements found "
        f"{life.replacements_found}/{life.superseded}",
        "hits ordered: "
        + ", ".join(
            f"{name.removeprefix('RANKING_').lower()} {n}"
            for name, n in sorted(result.rankings.items())
        ),
        "",
        f"search latency p50 {percentile(result.search_ms, 50):.1f} ms, "
        f"p95 {percentile(result.search_ms, 95):.1f} ms (client side, one call at a time); "
        f"loading {result.load_seconds:.1f} s",
    ]
    return "\n".join(lines)


def _learned_lines(learned: LearnedFusion, row: Callable[[str, Metrics], str]) -> list[str]:
    def silent(s: Silence) -> str:
        return (
            f"adversarial {s.adversarial_silent}/{s.adversarial_asked}, "
            f"never said {s.never_said_silent}/{s.never_said_asked}"
        )

    lines = ["", "learned fusion (models fitted on the other conversations, no floor):"]
    lines += [row(f"{c} {CATEGORIES[c]}", m) for c, m in sorted(learned.per_category.items())]
    lines += [
        row("all, held out", learned.overall),
        row("all, in sample", learned.in_sample),
        row("with the floor", learned.with_floor),
        f"  floors chosen: {', '.join(f'{s} {f:g}' for s, f in learned.floors)}",
        f"  silent without the floor: {silent(learned.silence_without_floor)}; "
        f"with it: {silent(learned.silence_with_floor)}",
        "  fitted on all conversations (paste into relevance.py):",
        f"  {learned.fitted!r}",
    ]
    return lines
