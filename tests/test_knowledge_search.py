"""Knowledge search's relevance and floor (issue 31): every chunk hit carries a calibrated
relevance; a search whose best chunk is below the floor answers nothing and says how many
chunks it withheld; ``min_relevance`` moves the floor and is checked.

Every search here is lexical (``lexical_only``), so what it finds and every relevance depend
on BM25 over the rows seeded, never on what an embedding model thinks of a string; each
document is one short paragraph, one chunk whatever the chunking rules.
"""

from __future__ import annotations

import secrets
import string

import grpc
import pytest

from brain.server.domain.knowledge.search import KNOWLEDGE_PARAMS
from brain.v1 import knowledge_pb2

from .conftest import BrainServer, unique
from .helpers import Api
from .test_knowledge import KB, put, search

FLOOR = KNOWLEDGE_PARAMS.lexical_model.floor


def word() -> str:
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(12))


async def _notes(api: Api, count: int = 50, **kw: object) -> list[tuple[str, str]]:
    """``count`` one-paragraph documents sharing "service restarted", each with two words
    of its own; returns those words."""
    words = []
    for i in range(count):
        a, b = word(), word()
        await put(api, f"notes/{i}.md", f"Deploy {i}: the {a} {b} service restarted.", **kw)
        words.append((a, b))
    return words


async def _search(api: Api, query: str, **kw: object) -> knowledge_pb2.SearchKnowledgeResponse:
    return await search(api, query, lexical_only=True, **kw)


async def test_a_query_matching_only_common_words_stays_silent(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """In a collection of 50 chunks, words in every chunk answer nothing (below_floor says
    how many were withheld), words of one chunk find it; min_relevance 0 turns the floor
    off and a stricter one silences even the good match."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=KB))
    words = await _notes(api)
    a, b = words[17]

    found = await _search(api, f"which {a} {b} service?")
    assert found.hits and found.hits[0].source.path == "notes/17.md"  # the positive control
    assert found.hits[0].relevance >= FLOOR and found.below_floor == 0
    assert all(0 < h.relevance < 1 for h in found.hits)

    weak = await _search(api, "service restarted", limit=5)
    assert list(weak.hits) == [] and weak.below_floor == 5
    everything = await _search(api, "service restarted", limit=5, min_relevance=0.0)
    assert len(everything.hits) == 5 and everything.below_floor == 0
    assert max(h.relevance for h in everything.hits) < FLOOR < found.hits[0].relevance
    strict = await _search(api, f"{a} {b}", min_relevance=0.99)
    assert list(strict.hits) == [] and strict.below_floor > 0


async def test_a_small_collection_answers_without_the_default_floor(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Below floor_min_rows chunks a term's rarity means little: three documents all saying
    "alpha" are all found by "alpha"; an explicit floor still applies there."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=KB))
    for name in ("report", "memo", "note"):
        await put(api, f"{name}.md", f"alpha {name}")
    found = await _search(api, "alpha")
    assert len(found.hits) == 3 and found.below_floor == 0
    assert list((await _search(api, "alpha", min_relevance=0.99)).hits) == []


@pytest.mark.parametrize("value", [1.5, -0.1, float("nan"), float("inf")])
async def test_min_relevance_outside_0_to_1_is_invalid_argument(
    brain_server: BrainServer, channel: grpc.aio.Channel, value: float
) -> None:
    """A floor outside 0..1 is INVALID_ARGUMENT naming min_relevance; the same search with
    a valid floor answers."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=KB))
    await put(api, "floor.md", "floor check")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _search(api, "floor", min_relevance=value)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "min_relevance" in (err.value.details() or "")
    assert len((await _search(api, "floor", min_relevance=0.0)).hits) == 1


async def test_relevance_and_below_floor_ignore_chunks_the_caller_cannot_see(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Sixty chunks under a label Bob lacks change neither Bob's hit, its relevance, nor
    his below_floor; Alice, who holds the label, is silenced by them (the positive control:
    the chunks are there and do count for those who see them)."""
    tenant = unique("t")
    alice = Api(
        channel, brain_server.mint_key(tenant, "alice", permissions=KB, labels=("team", "secret"))
    )
    bob = Api(channel, brain_server.mint_key(tenant, "bob", permissions=KB, labels=("team",)))
    await put(bob, "bob.md", "The ledger service restarted after the deploy.")
    before = await _search(bob, "ledger service restarted")
    assert len(before.hits) == 1

    await _notes(alice, 60, labels=["secret"])
    after = await _search(bob, "ledger service restarted")
    assert [h.source.path for h in after.hits] == ["bob.md"] and after.below_floor == 0
    assert after.hits[0].relevance == pytest.approx(before.hits[0].relevance)
    assert after.hits[0].score == pytest.approx(before.hits[0].score)

    common = await _search(alice, "service restarted", limit=5)
    assert list(common.hits) == [] and common.below_floor == 5
