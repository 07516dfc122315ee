"""A deterministic entity extractor for chat turns, for measuring the graph lane.

No model: runs of capitalised words in the text are names (a sentence's first word only
when it is not a common word). With ``speakers`` the speaker is an entity too (a person)
that ``mentions`` each name the turn holds. Good enough to ask whether entities help
recall on LoCoMo, and reproducible byte for byte.
"""

from __future__ import annotations

from brain.server.domain.retrieval.hops import COMMON, MAX_NAMES, names_in
from brain.v1 import graph_pb2

# The rule is the server's own (`hops.names_in`, which the second retrieval round reads
# from the best hits' text), so the entities asserted here and the names a second round
# finds are the same.
__all__ = ["COMMON", "EXTRACTORS", "MAX_NAMES", "extract", "names_in"]


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
