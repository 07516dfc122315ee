"""Two hops: a second lexical round with the names the first round's best hits mention.

A multi-hop question needs the memory that names the bridge (a person, a project, a
place) and the memory that answers about it: "when is the deadline of the project Alice
leads?" finds "Alice leads Zephyr", and only a second round asking about "Zephyr" finds
"Zephyr is due on 3 March". After the first round is fused, the names its best
``hop_hits`` hits mention (the entities asserted for them at write time, and runs of
capitalised words in their text, found by the same deterministic rule as brain-eval's
extractor) that the query does not already hold are added to the query, at most
``hop_entities`` of them, and the ``english`` BM25 lane runs once more with the expanded
query. Its hits join the candidates with their own rank and score (features ``hop_rr``
and ``hop_gap`` of the learned order); every candidate is then fused again.

The walls are those of the first round by construction: the names come only from hits
the caller was shown (read again through the visibility predicate), and the second round
runs through the same lanes with the same visibility, status, time and filters. No round
is run when the best hits name nothing new, so the cost is bounded: one read of at most
``hop_hits`` rows and one lexical round (two statements) per search.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import asyncpg
import numpy as np

from brain.server.domain import validation as check
from brain.server.domain.graph.assertions import query_names
from brain.server.domain.retrieval import lanes as retrieval
from brain.server.domain.retrieval.lanes import FusedHit, LaneHit, RetrievalParams
from brain.server.storage import hops as sql
from brain.server.storage import retrieval as retrieval_sql
from brain.server.storage.memories import RowFilter, TimeCoords
from brain.server.storage.visibility import Visibility
from brain.server.telemetry import metrics

__all__ = [
    "COMMON",
    "SecondRound",
    "bridge_names",
    "expanded_query",
    "names_in",
    "naming",
    "second_round",
]

_NAME_RUN = re.compile(r"\b[A-Z][\w'\u2019\-]*(?:\s+(?:of\s+|the\s+)?[A-Z][\w'\u2019\-]*)*")
_POSSESSIVE = re.compile(r"['\u2019]s$")
_WORD = re.compile(r"\w+")
# Capitalised words that are not names: sentence openers, pronouns, greetings, days.
_WORDS = """a an and are as at be but by can could did do does for from had has have he hey hi
    her his how i i'd i'll i'm i've if in is it it's its just let's me my no not of oh ok
    okay on or our she so thanks thank that that's the their them then there these they
    this those to too was we we're well were what when where which who why will with wow
    would yeah yes you you're your yep sure great awesome cool nice love haha lol omg hello
    congrats congratulations sounds totally really absolutely definitely monday tuesday
    wednesday thursday friday saturday sunday good glad happy sorry also maybe ah hmm aw
    aww btw anyway"""
COMMON = frozenset(_WORDS.split())
MAX_NAMES = 8  # per text


def names_in(text: str) -> list[str]:
    """Capitalised runs that look like names, in order, without repeats (at most 8)."""
    out: dict[str, None] = {}
    for match in _NAME_RUN.finditer(text):
        words = match.group(0).split()
        while words and words[0].lower().strip("'\u2019") in COMMON:
            words = words[1:]
        if not words:
            continue
        name = _POSSESSIVE.sub("", " ".join(words)).strip("-'\u2019")
        if len(name) > 1 and name.lower() not in COMMON:
            out[name] = None
    return list(out)[:MAX_NAMES]


def _words(text: str) -> set[str]:
    return set(_WORD.findall(check.normalise(text)))


def bridge_names(query: str, hits: Iterable[tuple[str, Sequence[str]]], cap: int) -> list[str]:
    """At most ``cap`` names the hits mention and the query does not hold, the names
    mentioned by more of the hits first, then in the hits' order.

    ``hits``: (content, asserted entity names) of the first round's best hits, best first.
    A name counts once per hit; a name whose every word is in the query adds nothing.
    """
    if cap <= 0:
        return []
    asked = _words(query)
    seen: dict[str, tuple[int, int, str]] = {}  # normalised -> (hits, first position, name)
    position = 0
    for content, asserted in hits:
        here: dict[str, str] = {}
        for name in (*asserted, *names_in(content)):
            key = check.normalise(name)
            words = _words(name)
            if key and words and not words <= asked:
                here.setdefault(key, name)
        for key, name in here.items():
            count, first, shown = seen.get(key, (0, position, name))
            seen[key] = (count + 1, first, shown)
            position += 1
    ranked = sorted(seen.values(), key=lambda v: (-v[0], v[1]))
    return [name for _, _, name in ranked[:cap]]


def expanded_query(query: str, names: Sequence[str]) -> str:
    """The query with the bridge names appended."""
    return " ".join([query, *names])


@dataclass(frozen=True)
class SecondRound:
    """What the second round found: by the expanded query (``names``, the ``english``
    lane) and by the query vector moved toward the best hits' vectors (``vector``)."""

    names: list[LaneHit] = field(default_factory=list)
    vector: list[LaneHit] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.names or self.vector)


async def second_round(
    conn: asyncpg.Connection,
    v: Visibility,
    query: str,
    f: RowFilter,
    t: TimeCoords,
    n: int,
    params: RetrievalParams,
    fused: Sequence[FusedHit],
    vector: Sequence[float] | None,
    model: str | None,
) -> SecondRound:
    """The second round from the best ``hop_hits`` hits of the first (see the module)."""
    if params.hop_hits <= 0 or not fused:
        return SecondRound()
    top = list(fused[: params.hop_hits])
    return SecondRound(
        await _names_round(conn, v, query, f, t, n, params, top),
        await _vector_round(conn, v, f, t, n, params, top, vector, model),
    )


async def _names_round(
    conn: asyncpg.Connection,
    v: Visibility,
    query: str,
    f: RowFilter,
    t: TimeCoords,
    n: int,
    params: RetrievalParams,
    top: Sequence[FusedHit],
) -> list[LaneHit]:
    """The ``english`` lane again, the query expanded with at most ``hop_entities`` names
    of ``top`` (read again through ``v``); nothing when they name nothing new."""
    if params.hop_entities <= 0:
        return []
    keys = [(h.row["tenant_id"], h.row["memory_id"], h.row["version"]) for h in top]
    names = bridge_names(query, await sql.hit_sources(conn, v, t, keys), params.hop_entities)
    if not names:
        return []
    expanded = expanded_query(query, names)
    with metrics.lane("hop"):
        if retrieval.uses_term_statistics(f, t):
            both = await retrieval.lexical_lanes(
                conn, v, expanded, f, t, n, params, configs=("english",)
            )
            return both.english
        size = await retrieval.corpus_size(conn, v, f, t)
        return await retrieval.lexical_lane(conn, v, expanded, f, t, n, params, corpus_size=size)


async def _vector_round(
    conn: asyncpg.Connection,
    v: Visibility,
    f: RowFilter,
    t: TimeCoords,
    n: int,
    params: RetrievalParams,
    top: Sequence[FusedHit],
    vector: Sequence[float] | None,
    model: str | None,
) -> list[LaneHit]:
    """The semantic lane again, its vector moved toward the vectors of ``top`` (that the
    caller may still see): memories like the best answers, not only like the question.
    No embedding is made: the query's vector and the stored ones are reused."""
    if vector is None or params.hop_vector_weight <= 0:
        return []
    rows = await retrieval_sql.embeddings_of(conn, v, [h.row for h in top], model)
    if not rows:
        return []
    hits = np.array([row["embedding"].to_numpy() for row in rows], dtype=np.float64)
    mixed = np.asarray(vector, dtype=np.float64) + params.hop_vector_weight * hits.mean(axis=0)
    mixed /= float(np.sqrt(mixed @ mixed)) or 1.0
    with metrics.lane("hop_vector"):
        return await retrieval.semantic_lane(
            conn, v, [float(x) for x in mixed], f, t, n, params, model=model
        )


async def naming(
    conn: asyncpg.Connection,
    v: Visibility,
    query: str,
    t: TimeCoords,
    ids: set[uuid.UUID],
    params: RetrievalParams,
) -> frozenset[uuid.UUID]:
    """Which candidates ``ids`` assert an entity the query names (feature ``named``)."""
    if not params.named_entities or not ids:
        return frozenset()
    return await sql.naming(conn, v, t, sorted(ids), query_names(query))


async def people_named(
    conn: asyncpg.Connection,
    v: Visibility,
    query: str,
    t: TimeCoords,
    params: RetrievalParams,
) -> list[str]:
    """The query's n-grams that are the name of a person a memory the caller can see
    asserts: what the semantic lane reads the query without
    (`RetrievalParams.names_apart`). An alias is not looked up (an index over every
    mention's aliases, with the walls checked per row, cost more than the search)."""
    if not params.names_apart:
        return []
    return await sql.people_seen(conn, v, t, query_names(query))
