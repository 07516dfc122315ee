"""A deterministic entity extractor for chat turns, for measuring the graph lane.

No model: runs of capitalised words in the text are names (a sentence's first word only
when it is not a common word). With ``speakers`` the speaker is an entity too (a person)
that ``mentions`` each name the turn holds. Good enough to ask whether entities help
recall on LoCoMo, and reproducible byte for byte.
"""

from __future__ import annotations

import re

from brain.v1 import graph_pb2

_NAME_RUN = re.compile(r"\b[A-Z][\w'\u2019\-]*(?:\s+(?:of\s+|the\s+)?[A-Z][\w'\u2019\-]*)*")
_POSSESSIVE = re.compile(r"['\u2019]s$")
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
MAX_NAMES = 8


def names_in(text: str) -> list[str]:
    """Capitalised runs that look like names, in order, without repeats."""
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


EXTRACTORS = ("off", "names", "speakers")


def extract(speaker: str, text: str, *, speakers: bool = False) -> graph_pb2.GraphDraft:
    """The names a turn mentions; with ``speakers`` also its speaker, who ``mentions``
    each of them."""
    draft = graph_pb2.GraphDraft()
    speaker = speaker.strip() if speakers else ""
    if speaker:
        draft.entities.add(name=speaker, type="person")
    for name in names_in(text):
        if name.casefold() == speaker.casefold():
            continue
        draft.entities.add(name=name)
        if speaker:
            draft.relations.add(subject=speaker, predicate="mentions", object=name)
    return draft
