"""`brain-eval updates` (issue 34, current state first): the set's shape, and the evaluation
through the real API on a few of its pairs, with the rule switched on and off."""

from __future__ import annotations

from dataclasses import replace

from brain.server.domain.retrieval.updates import statement, updates
from brain.server.measure import updates as updates_eval

from .conftest import BrainServer, unique


def test_the_splits_share_no_pair_and_dev_holds_the_rule_tests_pairs() -> None:
    """Held-out pairs are not dev pairs; every dev pair but one is an update by the text
    rule (that one, words before the subject, is left to a recorded conflict: see
    test_current_first) and no look-alike pair is (the rule was chosen on dev)."""
    dev, held = updates_eval.load("dev"), updates_eval.load("held-out")
    assert not {p.older for p in dev.updates} & {p.older for p in held.updates}
    assert not {p.question for p in dev.updates} & {p.question for p in held.updates}
    unseen = [p.newer for p in dev.updates if not updates(statement(p.older), statement(p.newer))]
    assert unseen == ["After the cache fix the nightly build takes 12 minutes"]
    for p in dev.different + held.different:
        assert not updates(statement(p.older), statement(p.newer)), p
        assert not updates(statement(p.newer), statement(p.older)), p
    assert len(held.updates) >= 15 and dev.distractors


async def test_the_evaluation_scores_the_rule_through_the_api(brain_server: BrainServer) -> None:
    """On three dev pairs the newer ranks above the older with the rule; as_of and
    valid_at between the two find the older only; the look-alike pair is not moved."""
    assert brain_server.running is not None
    memories = brain_server.running.memories
    shipped = memories.params
    dev = updates_eval.load("dev")
    small = replace(dev, updates=dev.updates[:3], different=dev.different[:1])

    def toggle(on: bool) -> None:
        memories.params = replace(shipped, current_first=on)

    key = brain_server.mint_key(unique("t"), "eval")
    try:
        result = await updates_eval.evaluate(brain_server.target, key, "dev", small, toggle)
    finally:
        memories.params = shipped
    scored = result.as_json()
    assert scored["pairs"] == 3 and scored["look_alike_pairs"] == 1
    assert scored["newer_first"] == 1.0  # both are found lexically; the rule orders them
    assert scored["as_of_kept"] == 1.0 and scored["valid_at_kept"] == 1.0
    assert scored["look_alike_moved"] == 0.0


def test_the_command_line_names_the_splits() -> None:
    """`brain-eval multilingual --split held-out` reads the held-out file; `brain-eval
    updates` runs both splits unless told one."""
    from brain.server.measure import multilingual
    from brain.server.measure.evaluation import build_parser

    parser = build_parser()
    held = parser.parse_args(["multilingual", "--split", "held-out"])
    assert multilingual.SPLITS[held.split] == multilingual.HELD_OUT and held.data is None
    assert parser.parse_args(["multilingual"]).split == "dev"
    assert parser.parse_args(["updates"]).split == "both"
    assert parser.parse_args(["updates", "--split", "held-out"]).split == "held-out"
