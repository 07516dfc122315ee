"""`brain-eval knowledge`: the QA file is well formed and the scoring counts what it says."""

from __future__ import annotations

from pathlib import Path

from brain.server.measure.knowledge_eval import DEFAULT_DATA, REPO, Question, load, run_knowledge

from .conftest import BrainServer, unique


def test_the_shipped_qa_file_points_at_real_evidence() -> None:
    """Every evidence phrase of the shipped QA set is verbatim in the document it names."""
    documents, questions = load(DEFAULT_DATA)
    assert len(questions) >= 30
    for q in questions:
        assert q.document in documents
        assert q.evidence in (REPO / q.document).read_text(), q.question


async def test_scoring_counts_hits_by_evidence_and_lists_misses(
    brain_server: BrainServer, tmp_path: Path
) -> None:
    """An answerable question scores at rank 1; one whose evidence is nowhere is a miss."""
    (tmp_path / "ops.md").write_text("# Ops\n\n## Backups\n\nBackups run nightly at 02:00.\n")
    key = brain_server.mint_key(unique("ke"), "eval", permissions="knowledge:read,knowledge:write")
    questions = [
        Question("When do backups run?", "ops.md", "nightly at 02:00"),
        Question("What colour is the logo?", "ops.md", "teal"),
    ]
    result = await run_knowledge(brain_server.target, key, tmp_path, ["ops.md"], questions)
    data = result.as_json()
    assert (data["hit@1"], data["hit@10"], data["mrr"]) == (0.5, 0.5, 0.5)
    assert result.misses == ["What colour is the logo?"] and result.chunks == 1
