"""What a person's name does to the semantic lane alone, on LoCoMo (names apart, issue 34).

    .venv/bin/python -m brain.server.measure.names_apart --data ../shared/data/locomo_dev.json
        [--embedder local]

Every turn of each conversation is embedded as brain-eval stores it ("<speaker>: <text>"
and the image caption), and every question with evidence (categories 1-4) is asked by
cosine alone, as asked and with the conversation's two speakers' names (and their
possessive) cut out (`assertions.without_names`, what the server's semantic lane reads),
replaced by "they", "someone" or "this person", or cut from the turns as well. Printed:
recall@10 per category and variant. No server and no fusion: the embedder in this
process, so the lane's own answer, not the search's.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from brain.server.domain.graph.assertions import without_names
from brain.server.domain.retrieval.embedders import build_embedder
from brain.server.measure.locomo.data import CATEGORIES, Conversation, load_locomo

K = 10
VARIANTS = ("as asked", "cut", "they", "someone", "this person", "cut, turns too")


def _replacer(names: Sequence[str], word: str) -> Callable[[str], str]:
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")(['\u2019]s)?\b")

    def replace(text: str) -> str:
        return pattern.sub(lambda m: word + ("'s" if m.group(2) else ""), text)

    return replace


def _apart(text: str, *, people: set[str]) -> str:
    return without_names(text, people)


def _cut_everywhere(names: Sequence[str]) -> Callable[[str], str]:
    replace = _replacer(names, "")
    return lambda text: " ".join(replace(text).split())


async def recall(
    conversations: Sequence[Conversation], embedder_name: str
) -> dict[str, dict[int, float]]:
    """Variant -> category -> mean recall@10 of the cosine ranking over the turns."""
    embedder = build_embedder(embedder_name)
    embed_queries = getattr(embedder, "embed_queries", embedder.embed)
    found: dict[str, dict[int, list[float]]] = {v: {} for v in VARIANTS}
    for conv in conversations:
        speakers = sorted({t.speaker for t in conv.turns if t.speaker})
        people = {s.casefold() for s in speakers}
        asked = [q for q in conv.questions if q.category in CATEGORIES and q.evidence]
        ids = [t.dia_id for t in conv.turns]
        cut = _cut_everywhere(speakers)
        turns = {
            False: np.asarray(await embedder.embed([t.content for t in conv.turns])),
            True: np.asarray(await embedder.embed([cut(t.content) for t in conv.turns])),
        }
        apart = functools.partial(_apart, people=people)
        rewrite: dict[str, Callable[[str], str]] = {
            "as asked": lambda text: text,
            "cut": apart,
            "they": _replacer(speakers, "they"),
            "someone": _replacer(speakers, "someone"),
            "this person": _replacer(speakers, "this person"),
            "cut, turns too": apart,
        }
        for variant in VARIANTS:
            queries = np.asarray(await embed_queries([rewrite[variant](q.text) for q in asked]))
            cosines = queries @ turns[variant == "cut, turns too"].T
            for q, row in zip(asked, cosines, strict=True):
                top = {ids[i] for i in np.argsort(-row, kind="stable")[:K]}
                share = len(q.evidence & top) / len(q.evidence)
                found[variant].setdefault(q.category, []).append(share)
    return {
        v: {c: float(np.mean(shares)) for c, shares in sorted(by.items())}
        for v, by in found.items()
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m brain.server.measure.names_apart", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data", type=Path, required=True, help="LoCoMo-format JSON file")
    parser.add_argument("--embedder", default="local", choices=["local", "multilingual"])
    args = parser.parse_args(argv)
    figures = asyncio.run(recall(load_locomo(args.data), args.embedder))
    categories = sorted({c for by in figures.values() for c in by})
    print(f"semantic lane alone, recall@{K} ({args.embedder}):")
    print(f"{'':<18}" + "".join(f"{CATEGORIES[c]:>13}" for c in categories))
    for variant, by in figures.items():
        print(f"{variant:<18}" + "".join(f"{by.get(c, 0.0):>13.3f}" for c in categories))


if __name__ == "__main__":
    main()
