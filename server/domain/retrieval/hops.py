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
from collections.abc import Iterable, Sequence

from brain.server.domain import validation as check

__all__ = ["COMMON", "bridge_names", "expanded_query", "names_in"]

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
