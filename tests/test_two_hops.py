"""Two hops (issue 34): a second round with the names the first round's best hits mention.

The bridge memory names the project ("Alice leads Zephyr…"); the answer speaks of the
project only ("Zephyr… is due on the third of March") and shares no word with the
question. The second round must obey the first round's walls: a bridge the caller cannot
see never expands its query, while the same search by a caller who sees the bridge does
find the answer (the positive control). Lexical searches only: nothing here depends on
what an embedding model thinks of these strings.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest

from brain.server.domain.retrieval.hops import bridge_names, expanded_query, names_in
from brain.server.domain.retrieval.relevance import FEATURES, LaneView, feature_rows
from brain.server.measure.bench import second_rounds
from brain.v1 import memory_pb2

from .conftest import BrainServer, unique
from .graph_helpers import draft, save
from .helpers import Api, search_params

WRITER = "memories:read,memories:write"
LEXICAL = memory_pb2.SEARCH_MODE_LEXICAL
QUESTION = "What deadline does Alice have?"


def test_bridge_names_are_new_capped_and_ranked_by_how_many_hits_name_them() -> None:
    """Names the query holds are skipped, the asserted ones count, and at most ``cap``."""
    hits = [
        ("Alice leads Zephyr with Bob", []),
        ("alice met the team", ["Kestrel"]),
        ("Zephyr and Orca ship together", []),
    ]
    assert bridge_names(QUESTION, hits, 3) == ["Zephyr", "Bob", "Kestrel"]
    assert bridge_names(QUESTION, hits, 1) == ["Zephyr"]
    assert bridge_names(QUESTION, hits, 0) == []
    assert bridge_names("what does alice do", [("Alice: Hey Alice!", [])], 3) == []
    assert expanded_query("q?", ["Zephyr", "Bob"]) == "q? Zephyr Bob"
    # The rule brain-eval's extractor asserts with: sentence openers are not names.
    assert names_in("Hey Caroline! The Pride parade in Boston was great.") == [
        "Caroline",
        "Pride",
        "Boston",
    ]


def test_the_second_round_is_two_features_of_the_order() -> None:
    """A hit the second round found carries 1 / its rank and its gap to the round's best."""
    col = {name: i for i, name in enumerate(FEATURES)}
    hits = [
        LaneView(2.0, 1, 0.0, 0, 0.0, 0, "s1"),
        LaneView(0.0, 0, 0.0, 0, 0.0, 0, "s2", hop_score=3.0, hop_rank=1),
        LaneView(0.0, 0, 0.0, 0, 0.0, 0, "s3", hop_score=1.0, hop_rank=2),
    ]
    rows = feature_rows(hits, 1000)
    assert list(rows[:, col["hop_rr"]]) == [0.0, 1.0, 0.5]
    assert rows[0, col["hop_gap"]] == 0.0 and rows[1, col["hop_gap"]] == 0.0
    assert rows[2, col["hop_gap"]] > 0.0


@contextmanager
def hops(server: BrainServer, entities: int) -> Iterator[None]:
    if server.running is None:
        pytest.skip("needs the in-process server to set search parameters")
    with search_params(server.running.memories, hop_entities=entities):
        yield


@pytest.mark.parametrize("named", ["in its text", "asserted at write time"])
async def test_a_hidden_bridge_never_expands_a_visible_one_does(
    walled_server: BrainServer, named: str
) -> None:
    """Behind a label wall: the caller cleared for the bridge gets the answer through the
    second round (and not without it); the caller who may not see the bridge never does,
    though it sees the answer itself and its own first-round hit. The bridge names the
    project in its text, or only in the entities asserted with it."""
    server, tenant, ns, token = walled_server, unique("hop"), unique("ns"), secrets.token_hex(3)
    project = f"Zephyr{token}"
    async with grpc.aio.insecure_channel(server.target) as channel:
        writer = Api(
            channel, server.mint_key(tenant, "w", permissions=WRITER, labels=("team", "secret")),
            ns,
        )  # fmt: skip
        team = Api(channel, server.mint_key(tenant, "t", labels=("team",)), ns)
        cleared = Api(channel, server.mint_key(tenant, "c", labels=("team", "secret")), ns)
        if named == "in its text":
            saved = await writer.save(f"Alice leads {project}", labels=["secret"])
        else:
            saved = await save(
                writer, "alice leads the rollout", draft([project]), labels=["secret"]
            )
        bridge = saved.memory.id
        answer = (await writer.save(f"{project} is due on the third of March")).memory.id
        own = (await writer.save("Alice likes green tea")).memory.id

        with hops(server, 3):
            seen = await cleared.search(QUESTION, mode=LEXICAL)
            assert bridge in seen and answer in seen  # the positive control
            walled = await team.search(QUESTION, mode=LEXICAL)
            assert own in walled  # the search answered, from what the caller sees
            assert bridge not in walled and answer not in walled
            # The answer itself is visible to that caller: only its bridge is not.
            assert answer in await team.search(project, mode=LEXICAL)
        with hops(server, 0):  # no second round: the answer shares no word with the question
            assert answer not in await cleared.search(QUESTION, mode=LEXICAL)


async def test_the_second_round_runs_only_when_the_best_hits_name_something_new(
    brain_server: BrainServer,
) -> None:
    """Bounded: no round when the best hits name nothing the query lacks, nor when it is
    switched off; one round otherwise (counted as brain-bench counts them)."""
    server, ns = brain_server, unique("ns")
    async with grpc.aio.insecure_channel(server.target) as channel:
        api = Api(channel, server.mint_key(unique("hop"), "w", permissions=WRITER), ns)
        await api.save("alice likes green tea")
        await api.save("Alice met Bob for tea")
        before = second_rounds()
        with hops(server, 3):
            await api.search("what tea does alice like?", mode=LEXICAL)
            assert second_rounds() == before + 1  # "Bob" is new
            await api.search("what tea do alice and bob like?", mode=LEXICAL)
            assert second_rounds() == before + 1  # nothing new: no round
        with hops(server, 0):
            await api.search("what tea does alice like?", mode=LEXICAL)
            assert second_rounds() == before + 1


async def test_a_hit_asserting_the_entity_the_query_names_ranks_first(
    walled_server: BrainServer,
) -> None:
    """Of two memories matching the question, the one asserting the entity it names (the
    ``named`` feature) ranks first, though the other matches more strongly and ranks
    first without the feature. Another user's memory asserting it is never a hit."""
    server, tenant, ns = walled_server, unique("hop"), unique("ns")
    name = f"Ilse{secrets.token_hex(3)}"
    question = f"Which tea does {name} like?"
    async with grpc.aio.insecure_channel(server.target) as channel:

        def user(who: str) -> Api:
            key = server.mint_key(tenant, who, permissions=WRITER, user=who)
            return Api(channel, key, ns, user_id=who)

        ann, ben = user("ann"), user("ben")
        plain = (await ann.save("likes black tea, iced tea in summer")).memory.id
        about = (await save(ann, "likes green tea in the morning", draft([name]))).memory.id
        hidden = (await save(ben, "likes white tea in the morning", draft([name]))).memory.id
        found = await ann.search(question, mode=LEXICAL)
        assert found[:2] == [about, plain] and hidden not in found
        assert (await ben.search(question, mode=LEXICAL))[:1] == [hidden]  # its own
        if server.running is not None:
            with search_params(server.running.memories, named_entities=False):
                assert (await ann.search(question, mode=LEXICAL))[:2] == [plain, about]
