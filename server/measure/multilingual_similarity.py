"""How far an embedder's cosine alone tells an answer, on the multilingual set.

    .venv/bin/python -m brain.server.measure.multilingual_similarity [--embedder multilingual]
        [--split dev|held-out]

Every memory of the split and every question are embedded (queries as queries); for each
question, its best cosine to any memory of the set (all languages, as in the mixed
namespace of ``brain-eval multilingual``). Printed: the best cosines of the unanswerable
questions, those of the answerable ones whose answer ranks first by cosine, and for a few
thresholds how many of each reach it. `relevance.MULTILINGUAL_MODEL.answer_similarity` was
read off the dev split: the first 0.01 step above every unanswerable question's best
cosine. No server: the embedder in this process.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

import numpy as np

from brain.server.domain.retrieval.embedders import build_embedder
from brain.server.measure.multilingual import SPLITS, load


async def best_cosines(embedder_name: str, split: str) -> tuple[list[float], list[float]]:
    """(best cosines of answerable questions answered first by cosine, of unanswerable)."""
    languages = load(SPLITS[split])
    embedder = build_embedder(embedder_name)
    memories = [(lang.code, n) for lang in languages for n in range(1, len(lang.memories) + 1)]
    stored = np.asarray(await embedder.embed([m for lang in languages for m in lang.memories]))
    questions = [q for lang in languages for q in lang.questions]
    embed_queries = getattr(embedder, "embed_queries", embedder.embed)
    asked = np.asarray(await embed_queries([q.text for q in questions]))
    answered, unanswerable = [], []
    for q, cosines in zip(questions, asked @ stored.T, strict=True):
        best = int(np.argmax(cosines))
        if q.answer is None:
            unanswerable.append(float(cosines[best]))
        elif memories[best] == (q.language, q.answer):
            answered.append(float(cosines[best]))
    return answered, unanswerable


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--embedder", default="multilingual", choices=["local", "multilingual"])
    p.add_argument("--split", default="dev", choices=sorted(SPLITS))
    args = p.parse_args(argv)
    answered, unanswerable = asyncio.run(best_cosines(args.embedder, args.split))
    print(f"{args.embedder} on {args.split}: {len(answered)} answers first by cosine, "
          f"{len(unanswerable)} unanswerable questions")  # fmt: skip
    print("unanswerable, best cosine:", " ".join(f"{c:.3f}" for c in sorted(unanswerable)))
    print("answers, cosine (lowest ten):", " ".join(f"{c:.3f}" for c in sorted(answered)[:10]))
    top = max(unanswerable, default=0.0)
    print(f"first 0.01 step above every unanswerable: {np.ceil(top * 100 + 1e-9) / 100:.2f}")
    for threshold in (0.80, 0.82, 0.84, 0.85, 0.86, 0.88, 0.90):
        reach_a = sum(c >= threshold for c in answered)
        reach_u = sum(c >= threshold for c in unanswerable)
        print(f"  {threshold:.2f}: answers {reach_a}/{len(answered)}, "
              f"unanswerable {reach_u}/{len(unanswerable)}")  # fmt: skip


if __name__ == "__main__":
    main()
