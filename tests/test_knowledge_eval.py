"""`brain-eval knowledge`: the QA files are well formed and the scoring counts what it says."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from brain.server.measure.knowledge_eval import DEFAULT_DATA, REPO, Question, load, run_knowledge

from .conftest import BrainServer, unique

LEGACY_DATA = REPO / "tests" / "data" / "knowledge_qa.json"
VALIDATION_DATA = REPO / "tests" / "data" / "knowledge_validation" / "questions.json"


def test_the_shipped_question_set_points_at_real_evidence_once() -> None:
    """The project's own set: at least 15 documents, 60 answerable questions and 15 without
    an answer, in a dev and a held-out part; each evidence phrase is verbatim in the document
    it names and nowhere else in the corpus (one answering passage), and every document of
    the folder is listed."""
    qa = load(DEFAULT_DATA)
    texts = {name: (qa.root / name).read_text() for name in qa.documents}
    on_disk = sorted(str(p.relative_to(qa.root)) for p in qa.root.rglob("*") if p.is_file())
    assert sorted(qa.documents) == on_disk and len(on_disk) >= 15
    answerable = [q for q in qa.questions if q.evidence is not None]
    unanswerable = [q for q in qa.questions if q.evidence is None]
    assert len(answerable) >= 60 and len(unanswerable) >= 15
    assert {q.part for q in qa.questions} == {"dev", "heldout"}
    for part in ("dev", "heldout"):
        assert any(q.part == part and q.evidence is None for q in qa.questions)
    dev_documents = {q.document for q in answerable if q.part == "dev"}
    held_documents = {q.document for q in answerable if q.part == "heldout"}
    assert dev_documents and held_documents and not dev_documents & held_documents
    for q in answerable:
        assert q.document in texts and q.evidence is not None
        assert q.evidence in texts[q.document], q.question
        assert sum(t.count(q.evidence) for t in texts.values()) == 1, q.question
    for q in unanswerable:
        assert q.document is None


def test_the_validation_set_is_another_corpus_with_evidence_once() -> None:
    """The validation set (written later, by another hand, about another company): its own
    documents, none of the shipped set's questions, every evidence phrase verbatim once in
    its corpus and in the document it names, at least 20 questions without an answer."""
    qa, shipped = load(VALIDATION_DATA), load(DEFAULT_DATA)
    texts = {name: (qa.root / name).read_text() for name in qa.documents}
    on_disk = sorted(str(p.relative_to(qa.root)) for p in qa.root.rglob("*") if p.is_file())
    assert sorted(qa.documents) == on_disk and len(on_disk) >= 20
    assert not {q.question for q in qa.questions} & {q.question for q in shipped.questions}
    assert {q.part for q in qa.questions} == {"validation"}
    answerable = [q for q in qa.questions if q.evidence is not None]
    assert len(answerable) >= 70
    assert sum(q.evidence is None and q.document is None for q in qa.questions) >= 20
    for q in answerable:
        assert q.document in texts and q.evidence is not None
        assert q.evidence in texts[q.document], q.question
        assert sum(t.count(q.evidence) for t in texts.values()) == 1, q.question


def test_the_legacy_qa_file_points_at_real_evidence() -> None:
    """Every evidence phrase of the repository-docs set is verbatim in the document it names."""
    qa = load(LEGACY_DATA)
    assert len(qa.questions) >= 30 and qa.root == REPO
    for q in qa.questions:
        assert q.document in qa.documents and q.evidence is not None
        assert q.evidence in (REPO / q.document).read_text(), q.question


async def test_scoring_counts_hits_by_evidence_silence_and_lists_misses(
    brain_server: BrainServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answerable question scores at rank 1; one whose evidence is nowhere is a miss; a
    question without an answer counts as silent only when it got no hits."""
    filler = brain_server.running.filler if brain_server.running is not None else None
    if filler is not None:
        # The run waits for the chunk's vector: the session server's filler looks for work
        # every 0.2 s instead of 5 s meanwhile (a poke during its quiet wait is not kept).
        monkeypatch.setattr(filler, "settings", replace(filler.settings, idle_seconds=0.2))
    (tmp_path / "ops.md").write_text("# Ops\n\n## Backups\n\nBackups run nightly at 02:00.\n")
    key = brain_server.mint_key(
        unique("ke"), "eval", permissions="knowledge:read,knowledge:write,memories:read"
    )
    questions = [
        Question("When do backups run?", "ops.md", "nightly at 02:00", "dev"),
        Question("What colour is the logo?", "ops.md", "teal", "dev"),
        Question("Do backups run nightly?", None, None, "heldout"),
    ]
    result = await run_knowledge(brain_server.target, key, tmp_path, ["ops.md"], questions)
    data = result.as_json()
    assert (data["hit@1"], data["hit@10"], data["mrr"]) == (0.5, 0.5, 0.5)
    assert data["parts"]["dev"]["answerable"] == 2 and data["parts"]["heldout"]["unanswerable"] == 1
    # "Do backups run nightly?" matches the only chunk: not silent.
    assert data["parts"]["heldout"]["silent"] == 0
    assert result.misses == ["What colour is the logo?"] and result.chunks == 1


def test_folds_deal_documents_and_the_floor_silences_weak_held_out_searches() -> None:
    """Dev questions follow their document's fold (unanswerable ones round-robin), the
    held-out part is never fitted on; on constructed searches (answers match two rare terms,
    unanswerable ones half a term), the floor fitted on dev silences every weak held-out
    search and keeps every answer at rank 1 (the positive control: without the floor the
    weak searches answer)."""
    import math

    from brain.server.domain.retrieval.relevance import LaneView
    from brain.server.measure import knowledge_folds as kf

    documents = [f"d{i}.md" for i in range(7)]
    assert [kf.fold_of("dev", d, 0, documents) for d in documents] == [0, 1, 2, 3, 4, 0, 1]
    assert [kf.fold_of("dev", None, i, documents) for i in range(6)] == [0, 1, 2, 3, 4, 0]
    assert kf.fold_of("heldout", "x.md", 3, documents) == -1

    unit = math.log1p((300 - 0.5) / 1.5)

    def view(units: float, rank: int) -> LaneView:
        return LaneView(units * unit, rank, units * unit, rank, 0.0, 0, f"doc{rank}")

    def searched(fold: int, answerable: bool) -> kf.ChunkCandidates:
        strong = 2.0 if answerable else 0.5
        return kf.ChunkCandidates(
            conversation=fold,
            evidence=kf.EVIDENCE if answerable else frozenset(),
            lanes=[view(strong, 1), view(0.3, 2), view(0.2, 3)],
            corpus_size=300,
            turns=[kf.EVIDENCE if answerable else frozenset(), frozenset(), frozenset()],
        )

    captured = [searched(f, a) for f in (*range(5), -1) for a in (True, True, True, False)]
    report = kf.cross_validate(captured)
    held = report.heldout.as_json()
    assert held["answerable"] == 3 and held["unanswerable"] == 1
    assert held["floored_hit@1"] == 1.0 and held["silent"] == 1
    assert report.dev.as_json()["silent"] == 5 and len(report.floors) == 5
    no_floor = dict(report.trade_off)[0.01]  # a floor below the weak searches' relevance
    assert report.fitted.floor > 0.01 and no_floor.silent == 0
    # The floor may cost hit@5 on the training folds up to the budget (0.02).
    assert report.tolerance == kf.FLOOR_TOLERANCE == 0.02
    assert report.as_json()["floor_tolerance"] == 0.02
