"""brain-eval: the LoCoMo metric by hand, and whole runs against real servers."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from brain.server.domain.retrieval.lanes import RetrievalParams
from brain.server.measure.crossval import best_candidate, candidate_grid, describe, leave_one_out
from brain.server.measure.locomo import (
    KS,
    NEVER_SAID,
    DataError,
    evidence_ids,
    load_locomo,
    run_locomo,
    score_question,
    session_time,
    summarise,
)
from brain.server.measure.stats import percentile

from .conftest import BrainServer
from .zygote import run_module


def turns(*groups: str) -> list[frozenset[str]]:
    """A ranking written as strings; ``"a+b"`` is one hit standing for two merged turns."""
    return [frozenset(g.split("+")) if g else frozenset() for g in groups]


def test_recall_counts_evidence_turns_within_each_cutoff() -> None:
    """recall@k is the share of evidence in the top k; MRR uses the first evidence hit."""
    ranked = turns("a", "x", "y", "b", "z", "c")
    score = score_question(ranked, frozenset({"a", "b", "c"}))
    assert score.recall == (1 / 3, 2 / 3, 1.0, 1.0)
    assert score.hit == (True, True, True, True)
    assert score.reciprocal_rank == 1.0


def test_late_first_hit_gives_reciprocal_rank_and_no_early_hits() -> None:
    """Evidence first at rank 7 scores 0 at k=1 and k=5, 1/7 reciprocal rank."""
    ranked = turns("x1", "x2", "x3", "x4", "x5", "x6", "e", "x8")
    score = score_question(ranked, frozenset({"e"}))
    assert score.recall == (0.0, 0.0, 1.0, 1.0)
    assert score.hit == (False, False, True, True)
    assert score.reciprocal_rank == pytest.approx(1 / 7)


def test_a_merged_hit_counts_every_turn_it_stands_for() -> None:
    """A deduplicated memory standing for two evidence turns finds both at once."""
    score = score_question(turns("x", "a+b"), frozenset({"a", "b"}))
    assert score.recall == (0.0, 1.0, 1.0, 1.0)
    assert score.reciprocal_rank == 0.5


def test_an_empty_ranking_scores_zero() -> None:
    """No hits: zero recall, no hit, zero reciprocal rank."""
    score = score_question([], frozenset({"a"}))
    assert score.recall == (0.0,) * len(KS)
    assert score.hit == (False,) * len(KS)
    assert score.reciprocal_rank == 0.0
    assert score_question(turns("a"), frozenset({"a"})).reciprocal_rank == 1.0  # control


def test_summary_averages_over_questions() -> None:
    """recall, hit rate and MRR are plain means over the questions."""
    scores = [
        score_question(turns("a", "b"), frozenset({"a", "b"})),  # 0.5 at k=1, then 1
        score_question(turns("x", "y", "c"), frozenset({"c", "d"})),  # 0 at k=1, then 0.5
    ]
    m = summarise(scores)
    assert m.questions == 2
    assert m.recall == {1: 0.25, 5: 0.75, 10: 0.75, 20: 0.75}
    assert m.hit == {1: 0.5, 5: 1.0, 10: 1.0, 20: 1.0}
    assert m.mrr == pytest.approx((1 + 1 / 3) / 2)


def test_percentile_is_nearest_rank() -> None:
    """p50 and p95 pick an observed value by nearest rank."""
    values = [float(v) for v in range(1, 21)]  # 1..20
    assert percentile(values, 50) == 10.0
    assert percentile(values, 95) == 19.0
    assert percentile([], 95) == 0.0


def test_malformed_evidence_entries_are_split() -> None:
    """Entries like "D1:3; D1:4" and "D2:1,D2:2" become separate dia_ids."""
    assert evidence_ids(["D1:3; D1:4", "D2:1,D2:2", " D3:1 "]) == {
        "D1:3",
        "D1:4",
        "D2:1",
        "D2:2",
        "D3:1",
    }


def test_session_dates_parse_as_utc() -> None:
    """The LoCoMo session date format parses to an aware UTC datetime."""
    assert session_time("1:56 pm on 8 May, 2023", "x") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    with pytest.raises(DataError, match="session_1_date_time"):
        session_time("yesterday", "session_1_date_time")


# Every question word that matters appears in its evidence turn and in no other turn, so
# lexical search alone ranks that turn first; the expected scores follow by hand.
TINY: list[dict[str, Any]] = [
    {
        "sample_id": "tiny-1",
        "conversation": {
            "speaker_a": "Alice",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Alice", "dia_id": "D1:1", "text": "Hi Bob, long time."},
                {
                    "speaker": "Bob",
                    "dia_id": "D1:2",
                    "text": "Adopted a ferret named Quibble last weekend.",
                },
                {
                    "speaker": "Alice",
                    "dia_id": "D1:3",
                    "text": "Look at mine!",
                    "blip_caption": "a photo of a green parrot",
                },
                {
                    "speaker": "Bob",
                    "dia_id": "D1:4",
                    "text": "Quibble takes a nap inside my sock drawer.",
                },
            ],
            "session_2_date_time": "10:04 am on 19 June, 2023",
            "session_2": [
                {"speaker": "Alice", "dia_id": "D2:1", "text": "I start theremin lessons soon."},
                {"speaker": "Bob", "dia_id": "D2:2", "text": "Sounds fun."},
                {"speaker": "Alice", "dia_id": "D2:3", "text": "Also visiting grandma."},
                {"speaker": "Bob", "dia_id": "D2:4", "text": "Sounds fun."},  # deduplicated
            ],
        },
        "qa": [
            # single-hop, found at rank 1: recall 1
            {"question": "What did Bob name his ferret?", "evidence": ["D1:2"], "category": 4},
            # multi-hop, one of two evidence turns findable (malformed entry): recall 0.5
            {"question": "Where does Quibble nap?", "evidence": ["D1:4; D2:3"], "category": 1},
            # multi-hop, no shared word: recall 0
            {
                "question": "Is opera enjoyable for grandparents?",
                "evidence": ["D2:3"],
                "category": 1,
            },
            # temporal, found at rank 1: recall 1
            {
                "question": "When did Alice start theremin lessons?",
                "evidence": ["D2:1"],
                "category": 2,
            },
            # open-domain, evidence is the second of two merged turns: recall 1
            {"question": "Which sounds fun?", "evidence": ["D2:4"], "category": 3},
            # adversarial: never asked
            {
                "question": "What did Bob name his parrot?",
                "adversarial_answer": "Quibble",
                "evidence": ["D1:3"],
                "category": 5,
            },
            # no evidence: never asked
            {"question": "Who is Alice?", "evidence": [], "category": 4},
        ],
    }
]


@pytest.fixture
def tiny_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return path


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain ``text`` (the PostgreSQL data dir)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args:
            found.append(args)
    return found


async def test_private_run_scores_the_tiny_file_and_removes_its_database(
    tiny_file: Path, tmp_path: Path
) -> None:
    """A private run gives the hand-derived scores, then leaves no directory or process."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = await run_locomo(load_locomo(tiny_file), embedder="none", scratch_dir=scratch)

    assert result.turns == 8
    assert result.overall.questions == 5
    assert result.overall.recall == {k: pytest.approx(0.7) for k in KS}
    assert result.overall.hit == {k: pytest.approx(0.8) for k in KS}
    assert result.overall.mrr == pytest.approx(0.8)
    assert sorted(result.per_category) == [1, 2, 3, 4]
    multi_hop = result.per_category[1]
    assert (multi_hop.questions, multi_hop.recall[10], multi_hop.mrr) == (2, 0.25, 0.5)
    assert all(result.per_category[c].recall[1] == 1.0 for c in (2, 3, 4))
    assert len(result.search_ms) == 5
    assert list(scratch.iterdir()) == []
    assert processes_mentioning(str(scratch)) == []
    own = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    assert processes_mentioning(own)  # positive control: the scan does see live processes


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("brain.server.measure.evaluation", "locomo", *args, timeout=60)


def test_json_report_against_a_target_has_every_key(
    tiny_file: Path, brain_server: BrainServer
) -> None:
    """--json --target prints one object with every metric key, per category too."""
    key = brain_server.mint_key(
        "eval-target", "eval", permissions="memories:read,memories:write,memories:forget"
    )
    done = run_cli(
        "--data", str(tiny_file), "--json", "--target", brain_server.target, "--api-key", key
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    required = {f"{m}@{k}" for m in ("recall", "hit") for k in KS} | {
        "mrr", "search_p50_ms", "search_p95_ms", "questions", "turns", "embedder",
        "per_category", "load_seconds",
    }  # fmt: skip
    assert required <= report.keys()
    assert (report["questions"], report["turns"]) == (5, 8)
    # The shared server may run a semantic lane too, so only the lexical floor is exact.
    recalls = [report[f"recall@{k}"] for k in KS]
    assert recalls == sorted(recalls) and recalls[-1] >= 0.7
    assert sorted(report["per_category"]) == ["1", "2", "3", "4"]
    assert report["per_category"]["4"]["questions"] == 1
    assert report["silence"]["adversarial"]["asked"] == 1
    assert report["lifecycle"]["leaked"] == 0
    assert "cross_validated" not in report


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ('{"qa": []}', "expected a non-empty JSON list of LoCoMo samples"),
        (
            json.dumps([{"conversation": {"session_1": [{"speaker": "A"}]}, "qa": []}]),
            "session_1_date_time: missing",
        ),
    ],
)
def test_a_malformed_file_exits_2_with_one_line(tmp_path: Path, content: str, message: str) -> None:
    """A file not in the LoCoMo format fails before any server starts: exit 2, one line."""
    path = tmp_path / "bad.json"
    path.write_text(content)
    done = run_cli("--data", str(path))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("brain-eval: error: ")
    assert message in done.stderr
    assert done.stderr.count("\n") == 1


def test_loading_builds_turn_contents_and_skips_unasked_questions(tiny_file: Path) -> None:
    """Turns carry speaker, text, caption and session date; unasked questions are dropped."""
    (conv,) = load_locomo(tiny_file)
    by_id = {t.dia_id: t for t in conv.turns}
    assert by_id["D1:3"].content == "Alice: Look at mine! [image: a photo of a green parrot]"
    assert by_id["D2:1"].valid_from == datetime(2023, 6, 19, 10, 4, tzinfo=UTC)
    assert [q.category for q in conv.questions] == [4, 1, 1, 2, 3]
    assert conv.questions[1].evidence == {"D1:4", "D2:3"}


async def test_silence_and_lifecycle_checks_on_the_tiny_file(tiny_file: Path) -> None:
    """The checks count by hand: what should be silent, and what was superseded or forgotten.

    Lexically, the adversarial question shares "Bob" and "parrot" with turns, so it
    answers; of the never-said questions, two used to answer on "of" alone (the exact-form
    lane, which now reads content words only), and one on a word it shares, until the floor
    applied in small buckets too (issue 34: one shared word of a longer question is weak
    evidence); all eight find
    nothing. The lifecycle sample is D1:2 (superseded), D2:3 (forgotten) and
    D2:1 (superseded): the two replacements come back, the old rows never do, although
    each is also searched for by its own text.
    """
    result = await run_locomo(load_locomo(tiny_file), embedder="none")

    silence = result.silence
    assert (silence.adversarial_asked, silence.adversarial_silent) == (1, 0)
    assert (silence.never_said_asked, silence.never_said_silent) == (len(NEVER_SAID), 8)
    life = result.lifecycle
    assert (life.superseded, life.forgotten, life.searches) == (2, 1, 6)
    assert life.replacements_found == 2  # the positive control
    assert life.leaked == 0
    assert result.overall.recall[10] == pytest.approx(0.7)  # asked before any change
    assert result.rankings == {"RANKING_FUSED": 5}


async def test_an_unreachable_reranker_is_reported_not_hidden(tiny_file: Path) -> None:
    """With a reranker nobody serves, every search with hits says it fell back.

    The figures stay the fused ones; the question with no hit had nothing to rerank.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before the run: nothing listens there
    options = {"reranker_url": f"http://127.0.0.1:{port}", "reranker_model": "m"}
    result = await run_locomo(load_locomo(tiny_file), embedder="none", embedder_options=options)

    assert result.rankings == {"RANKING_FUSED_RERANKER_UNAVAILABLE": 4, "RANKING_FUSED": 1}
    assert result.overall.recall[10] == pytest.approx(0.7)  # the fused order, unharmed


async def test_folds_choose_on_the_other_conversations(tiny_file: Path) -> None:
    """--folds scores each conversation with a candidate chosen on the others.

    Two copies of the tiny conversation rank alike under every candidate, so every fold
    keeps the first hand-weighted candidate (ties go to it) and the figures equal the
    plain run. The learned fusion is refitted per fold on the captured candidates: every
    question and every should-be-silent search of the held-out copy is scored once.
    """
    (conv,) = load_locomo(tiny_file)
    twins = [conv, dataclasses.replace(conv, sample_id="tiny-2")]
    result = await run_locomo(twins, embedder="none", folds=True)

    cv = result.cross_validation
    assert cv is not None
    assert cv.candidates == len(candidate_grid(semantic=False)) - 1  # the shipped one apart
    assert cv.chosen == [("tiny-1", "fusion=minmax"), ("tiny-2", "fusion=minmax")]
    assert cv.overall.questions == 10
    assert cv.overall.recall[10] == pytest.approx(0.7)
    assert cv.in_sample.recall[10] == pytest.approx(0.7)
    assert cv.in_sample_candidate == "fusion=minmax"
    assert len(result.search_ms) == 10  # latency from the shipped pass only
    learned = cv.learned
    assert learned is not None
    assert learned.overall.questions == learned.with_floor.questions == 10
    assert [sample for sample, _ in learned.floors] == ["tiny-1", "tiny-2"]
    for silence in (learned.silence_without_floor, learned.silence_with_floor):
        assert (silence.adversarial_asked, silence.never_said_asked) == (2, 2 * len(NEVER_SAID))
    # A floor is never chosen that costs the training questions more than the tolerance.
    assert learned.with_floor.recall[10] >= learned.overall.recall[10] - 0.01 - 1e-9


@dataclasses.dataclass(frozen=True)
class R10:
    """A question score with only recall@10 set (the cutoff the folds choose by)."""

    r10: float

    @property
    def recall(self) -> tuple[float, ...]:
        return (0.0, 0.0, self.r10, 0.0)


def test_leave_one_out_chooses_without_the_held_out_conversation() -> None:
    """Each fold picks by the other conversations' pooled recall, never the held-out one.

    Candidate 1 is perfect on conversation 0 and poor elsewhere; candidate 0 is steady.
    On all three the steady one wins (0.5 vs 0.4). Held out 0: the others give 0.5 vs 0.1,
    so steady; held out 1 or 2: the others give 0.5 vs 0.55, so candidate 1.
    """
    at = KS.index(10)
    steady = [[R10(0.5)], [R10(0.5)], [R10(0.5)]]
    spiky = [[R10(1.0)], [R10(0.1)], [R10(0.1)]]
    scores = [steady, spiky]
    assert best_candidate(scores, [0, 1, 2], at) == 0
    folds = leave_one_out(scores, at)
    assert [(f.held_out, f.chosen) for f in folds] == [(0, 0), (1, 1), (2, 1)]
    assert best_candidate([steady, steady], [0, 1, 2], at) == 0  # ties go to the earlier
    with pytest.raises(ValueError, match="two conversations"):
        leave_one_out([[[R10(1.0)]]], at)


def test_the_grid_starts_with_the_shipped_parameters_and_has_no_duplicates() -> None:
    """Ties favour what ships; without an embedder only lexical settings vary."""
    for semantic in (False, True):
        grid = candidate_grid(semantic)
        assert grid[0] == RetrievalParams()
        assert len(set(grid)) == len(grid) > 1
    assert {(p.semantic_weight, p.feedback_weight) for p in candidate_grid(False)} == {(0.4, 0.5)}
    assert describe(RetrievalParams()) == "shipped"
    assert describe(RetrievalParams(exact_weight=0.0)) == "exact_weight=0.0"


def test_folds_with_a_target_exits_2(tiny_file: Path) -> None:
    """--folds swaps the private server's parameters, so a --target is refused up front."""
    done = run_cli("--data", str(tiny_file), "--folds", "--target", "127.0.0.1:1", "--api-key", "x")
    assert done.returncode == 2
    assert "--folds needs the private server" in done.stderr
