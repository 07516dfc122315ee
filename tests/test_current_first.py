"""Current state first (issue 34): of two memories saying the same thing with a changed
value, the newer ranks first for a question about now; other times keep their meaning."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from brain.server.domain.retrieval.lanes import FusedHit
from brain.server.domain.retrieval.updates import current_first, statement, updates
from brain.v1 import common_pb2

from .conftest import BrainServer, unique
from .helpers import Api, ts

# (older, newer, a question about the current state)
UPDATED_FACTS = [
    ("The team meeting is at 2pm on Friday", "The team meeting moved to 3pm on Friday",
     "when is the team meeting?"),
    ("Priya leads the payments team", "Sam is now the payments team lead",
     "who leads the payments team?"),
    ("The staging database listens on port 5433",
     "The staging database now listens on port 5434", "which port does staging listen on?"),
    ("Deploys happen on Thursday", "Deploys happen on Friday now", "when do deploys happen?"),
    ("Alice lives in Berlin", "Alice now lives in Lisbon", "where does Alice live?"),
    ("The API rate limit is 100 requests per minute",
     "The API rate limit was raised to 500 requests per minute", "what is the API rate limit?"),
    ("The release train leaves every 2 weeks", "The release train leaves every 3 weeks",
     "how often does the release train leave?"),
]  # fmt: skip
# Alike but not one statement updating another: the rule leaves their order alone.
DIFFERENT = [
    ("Alice likes coffee", "Bob likes tea"),
    ("The staging database listens on port 5433", "The production database listens on 5432"),
    ("Had coffee with Alex on Monday", "Went hiking with Sam on Sunday"),
]


@pytest.mark.parametrize(("older", "newer", "question"), UPDATED_FACTS)
def test_the_rule_sees_each_update(older: str, newer: str, question: str) -> None:
    """Each pair is one statement with a changed value (or corrected), and not backwards."""
    assert updates(statement(older), statement(newer))


@pytest.mark.parametrize(("first", "second"), DIFFERENT)
def test_the_rule_leaves_different_statements_alone(first: str, second: str) -> None:
    """Statements that only look alike update nothing, either way."""
    assert not updates(statement(first), statement(second))
    assert not updates(statement(second), statement(first))


def hit(content: str, days_ago: float) -> FusedHit:
    at = datetime(2026, 11, 1, tzinfo=UTC) - timedelta(days=days_ago)
    row: dict[str, Any] = {"content": content, "valid_from": at, "recorded_at": at}
    return FusedHit(row=row, score=0.0)  # type: ignore[arg-type]


def test_the_newer_moves_just_above_the_older_and_the_rest_keeps_its_order() -> None:
    """Only the newer update moves, to just above the statement it updates."""
    other, old, unrelated, new = (
        hit("Lunch is at noon", 9), hit("The team meeting is at 2pm on Friday", 5),
        hit("Bob likes tea", 3), hit("The team meeting moved to 3pm on Friday", 1),
    )  # fmt: skip
    assert current_first([other, old, unrelated, new]) == [other, new, old, unrelated]
    assert current_first([other, new, old, unrelated]) == [other, new, old, unrelated]


async def test_search_ranks_the_current_state_first(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """For every updated fact, a question about now ranks the newer memory above the older
    one; asked as of before the update, the older one answers (time keeps its meaning)."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"), namespace=unique("ns"))
    start = datetime.now(UTC) - timedelta(days=30)
    saved: list[tuple[str, str, str]] = []
    for n, (older, newer, question) in enumerate(UPDATED_FACTS):
        old = await api.save(older, valid_from=ts(start + timedelta(days=n)))
        new = await api.save(newer, valid_from=ts(start + timedelta(days=n + 10)))
        saved.append((old.memory.id, new.memory.id, question))
    for _ in range(3):  # unrelated memories, so the bucket is not only the pairs
        await api.save(f"An unrelated note about the office plants {unique('p')}")
    for old_id, new_id, question in saved:
        hits = await api.search(question, limit=10)
        assert new_id in hits and old_id in hits, question
        assert hits.index(new_id) < hits.index(old_id), question
    old_id, new_id, question = saved[0]
    before = (await api.get(old_id)).recorded_at  # the older was saved, the newer not yet
    past = await api.search(question, limit=10, time=common_pb2.TimeTravel(as_of=before))
    assert old_id in past and new_id not in past  # as of then, only the older was known
