"""The LoCoMo data set: turn-level retrieval quality through the real API (``brain-eval locomo``).

Each conversation is loaded into its own bucket with one SaveMemory per turn
(``"<speaker>: <text>"`` plus the image caption; the session date as valid time). Every
question of categories 1-4 that has evidence is then asked with SearchMemories, and a
question scores by how many of its evidence turns come back: recall@k, hit@k and MRR,
plus client-side search latency. No LLM is involved.

Two checks follow in the same buckets. Silence: the adversarial (category 5) questions
and questions about things never said should return nothing; the report gives the share
that did. Lifecycle: a sample of evidence memories is superseded by corrected versions
and others are forgotten; their questions are asked again, and no superseded or forgotten
memory may come back, while the replacements should (the positive control).

With ``--folds`` the retrieval is cross-validated (see `crossval`): the shipped pass
captures every candidate the server fused, the relevance models and their floor are
refitted on all conversations but one and scored on that one; and the hand-weighted
fusion is asked every question once per candidate of a small grid, each conversation
scored with the candidate chosen on the others.

Without ``--target`` a private PostgreSQL and brain-server are started in a temporary
directory and removed afterwards, with one fresh tenant and key per conversation.

Where to look: `data` reads the file; `scoring` is the metric and the checks' tallies;
`run` loads the buckets and asks the questions through the API, then the two checks;
`folds` is ``--folds``; `report` is the result, its JSON and its table. Imports point that
way too: `run` → `report` → `folds` → `scoring` → `data`.
"""

from brain.server.measure.locomo.data import (
    ADVERSARIAL,
    CATEGORIES,
    Conversation,
    DataError,
    Question,
    Turn,
    evidence_ids,
    load_locomo,
    session_time,
)
from brain.server.measure.locomo.folds import CrossValidation, LearnedFusion
from brain.server.measure.locomo.report import EvalResult, format_table
from brain.server.measure.locomo.run import NEVER_SAID, Progress, run_locomo
from brain.server.measure.locomo.scoring import (
    KS,
    Lifecycle,
    Metrics,
    QuestionScore,
    Silence,
    by_category,
    score_question,
    summarise,
)

__all__ = [
    "ADVERSARIAL",
    "CATEGORIES",
    "KS",
    "NEVER_SAID",
    "Conversation",
    "CrossValidation",
    "DataError",
    "EvalResult",
    "LearnedFusion",
    "Lifecycle",
    "Metrics",
    "Progress",
    "Question",
    "QuestionScore",
    "Silence",
    "Turn",
    "by_category",
    "evidence_ids",
    "format_table",
    "load_locomo",
    "run_locomo",
    "score_question",
    "session_time",
    "summarise",
]
