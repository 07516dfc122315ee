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
from typing import Any

import grpc
import pytest

from brain.server.domain.knowledge.search import KNOWLEDGE_PARAMS
from brain.v1 import knowledge_pb2, memory_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
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


async def test_chunks_of_equal_score_rank_in_document_order(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Ten sections saying the same thing score the same; they rank by their place in the
    document (chunk number), the same in every search, not by their random chunk ids, and
    the lane's candidate limit keeps the first ones (issue 31: a refit must not depend on
    the run)."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=KB))
    sections = "\n\n".join(f"# Part {i}\n\nalpha gamma delta" for i in range(10))
    await put(api, "same.md", sections)
    await put(api, "other.md", "# Other\n\nepsilon zeta")  # the positive control: not found
    found = await _search(api, "alpha", limit=10, min_relevance=0.0)
    assert [h.source.path for h in found.hits] == ["same.md"] * 10
    lines = [h.source.line_start for h in found.hits]
    assert lines == sorted(lines) and len(set(lines)) == 10
    first = await _search(api, "alpha", limit=3, min_relevance=0.0)
    assert [h.source.line_start for h in first.hits] == lines[:3]


def coined(i: int, salt: int) -> str:
    """A made-up word, the same on every run: a 'q' and three syllables from ``i``."""
    syllables = ("ka", "lo", "mi", "ne", "ru", "sa", "te", "vo")
    n = i * 7 + salt * 61
    return "q" + "".join(syllables[(n >> (3 * k)) % 8] for k in range(3))


async def test_a_question_sharing_one_rare_word_with_a_passage_is_silent(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The issue-31 case: a question that names a passage's rare word among words no chunk
    holds ("the password of the <queue>'s <x> <y> replica") covers little of what it asks,
    and the floor silences it, while a question in the passage's own words is answered in
    the same collection (the positive control); with min_relevance 0 the first question
    gets every chunk that matched, its passage first, each below the default floor."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=KB))
    queues = [coined(i, 1) for i in range(60)]
    for i, queue in enumerate(queues):
        text = (
            f"The {queue} queue drains into the {coined(i, 2)} archive every night; "
            f"the {queue} queue is paused during backups."
        )
        await put(api, f"queues/{i}.md", text)
    queue = queues[23]
    floor = KNOWLEDGE_PARAMS.lexical_model.floor

    asked = await _search(api, f"Which archive does the {queue} queue drain into?")
    assert asked.hits and asked.hits[0].source.path == "queues/23.md"
    assert asked.hits[0].relevance >= floor and asked.below_floor == 0

    strange = f"{coined(99, 3)} {coined(98, 3)}"  # words no chunk holds
    unknown = f"What is the password of the {queue} queue's {strange} replica?"
    silent = await _search(api, unknown, limit=5)
    assert list(silent.hits) == [] and silent.below_floor > 0
    shown = await _search(api, unknown, limit=5, min_relevance=0.0)
    assert shown.hits[0].source.path == "queues/23.md" and shown.below_floor == 0
    assert len(shown.hits) == silent.below_floor
    assert all(0 < h.relevance < floor for h in shown.hits)
    assert shown.hits[0].relevance < asked.hits[0].relevance


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


# -- neighbours in BuildContext --------------------------------------------------------


def chunk_row(
    no: int, lines: tuple[int, int], content: str, heading: str = "Ops"
) -> dict[str, Any]:
    return {
        "tenant_id": "t", "chunk_id": f"c{no}", "document_id": "d", "version": 1,
        "chunk_no": no, "collection": "docs", "path": "ops.md", "heading_path": [heading],
        "line_start": lines[0], "line_end": lines[1], "content": content,
    }  # fmt: skip


def test_a_passage_shows_shared_lines_once_and_keeps_its_line_range() -> None:
    """Overlapping code windows join without repeating the shared lines; two chunks of one
    long line cut at characters (same line, different text) are joined whole."""
    from brain.server.domain.context import passage

    shown = passage(chunk_row(1, (3, 5), "c\nd\ne"), [chunk_row(0, (1, 3), "a\nb\nc")])
    assert (shown.content, shown.line_start, shown.line_end) == ("a\nb\nc\nd\ne", 1, 5)
    cut = passage(chunk_row(1, (7, 7), "tail"), [chunk_row(0, (7, 7), "head")])
    assert (cut.content, cut.line_start, cut.line_end) == ("head\ntail", 7, 7)
    # Paragraphs a blank line apart (lines 1, 3 and 5-6): the cited lines 1-6, blanks kept.
    apart = passage(
        chunk_row(1, (3, 3), "two"), [chunk_row(0, (1, 1), "one"), chunk_row(2, (5, 6), "x\ny")]
    )
    assert (apart.content, apart.line_start, apart.line_end) == ("one\n\ntwo\n\nx\ny", 1, 6)


def test_neighbours_use_only_the_budget_chosen_hits_left() -> None:
    """With room, a chosen chunk is shown with its neighbours (content and line range); with
    room for the bare chunks only, nothing is pushed out; a neighbour that is an item of its
    own is not shown twice."""
    from brain.server.domain.context import estimate_tokens, pack
    from brain.server.domain.retrieval.lanes import FusedHit

    before, hit, after = (chunk_row(n, (10 * n + 1, 10 * n + 9), f"part {n} " + "x" * 200)
                          for n in range(3))  # fmt: skip
    other = chunk_row(7, (71, 79), "other " + "y" * 200, heading="Elsewhere")
    around = {"c1": [before, after]}
    hits = [FusedHit(row=hit, score=0.9), FusedHit(row=other, score=0.5)]

    wide = pack([], 4000, hits, around=around)
    first = wide.items[0]
    assert [i.id for i in wide.items] == ["c1", "c7"]
    assert "part 0" in first.content and "part 2" in first.content
    assert (first.source.line_start, first.source.line_end) == (1, 29)
    header = wide.context.split("\n")[0]
    assert wide.tokens_used == estimate_tokens(header) + sum(i.tokens for i in wide.items)

    bare = pack([], 4000, hits)
    tight = pack([], bare.tokens_used, hits, around=around)  # room for the bare hits only
    assert [i.content for i in tight.items] == [i.content for i in bare.items]
    assert (tight.items[0].source.line_start, tight.items[0].source.line_end) == (11, 19)

    both = [FusedHit(row=hit, score=0.9), FusedHit(row=after, score=0.8)]
    once = pack([], 4000, both, around=around)
    assert once.context.count("part 2") == 1 and "part 0" in once.items[0].content

    # Memories mixed in: they are packed as before, and the chunk still gets its neighbours.
    memory = {
        "memory_id": "m1", "valid_from": None, "valid_to": None, "status": "active",
        "content": "We moved the deploy to Fridays",
    }  # fmt: skip
    mixed = pack([FusedHit(row=memory, score=0.95)], 4000, hits[:1], around=around)
    assert [i.id for i in mixed.items] == ["m1", "c1"] and "part 0" in mixed.items[1].content


async def test_build_context_shows_a_chunk_with_its_own_sections_neighbours(
    pg_cluster: PgCluster, loop_thread: LoopThread
) -> None:
    """Through BuildContext on a lexical-only server: the chunk holding the query's word is
    shown with the chunks before and after it in its section (found by their own words),
    never with the next section's (the budget rule is pinned by the test above)."""
    server = BrainServer(
        cluster=pg_cluster, loop=loop_thread, settings=server_settings(pg_cluster, embedder="none")
    )
    server.start()
    try:
        async with server.channel() as channel:
            api = Api(channel, server.mint_key(unique("t"), "a", permissions=f"{KB},memories:read"))
            marks = [word() for _ in range(7)]
            filler = " ".join(["the deploy pipeline checks every stage"] * 35)
            section = "\n\n".join(f"Step {i}: {marks[i]}. {filler}" for i in range(6))
            doc = f"# Runbook\n\n## Steps\n\n{section}\n\n## Later\n\n{marks[6]} closing notes.\n"
            await put(api, "runbook.md", doc)
            source = {}
            for m in marks:
                (h,) = (await _search(api, m)).hits
                source[m] = h.source
            query = marks[3]
            same = [m for m in marks if source[m].heading_path == source[query].heading_path]
            assert len({source[m].chunk_id for m in same}) >= 3  # the section spans chunks
            mine = source[query]
            before = [m for m in same if source[m].line_end < mine.line_start]
            after = [m for m in same if source[m].line_start > mine.line_end]
            assert before and after
            prev = max(before, key=lambda m: source[m].line_end)
            nxt = min(after, key=lambda m: source[m].line_start)

            def build(budget: int) -> Any:
                return api.memories.BuildContext(
                    memory_pb2.BuildContextRequest(
                        scope=api.scope(), query=query, token_budget=budget
                    ),
                    metadata=api.md,
                )

            wide = await build(8000)
            (item,) = [i for i in wide.items if i.id == mine.chunk_id]
            assert query in item.content and prev in item.content and nxt in item.content
            assert marks[6] not in wide.context  # the next section is not a neighbour
            assert item.source.line_start <= source[prev].line_start
            assert item.source.line_end >= source[nxt].line_end
    finally:
        server.stop()


def test_a_neighbour_between_two_chosen_chunks_is_shown_and_counted_once() -> None:
    """Chunks 0 and 2 chosen, chunk 1 the neighbour of both: it was shown beside each and
    counted twice against the budget. The better chunk shows it; the other does not."""
    from brain.server.domain.context import estimate_tokens, pack
    from brain.server.domain.retrieval.lanes import FusedHit

    first, middle, last = (chunk_row(n, (10 * n + 1, 10 * n + 9), f"part {n} " + "x" * 200)
                           for n in range(3))  # fmt: skip
    around = {"c0": [middle], "c2": [middle]}
    built = pack(
        [], 4000, [FusedHit(row=first, score=0.9), FusedHit(row=last, score=0.8)], around=around
    )
    assert [i.id for i in built.items] == ["c0", "c2"]
    assert built.context.count("part 1") == 1
    assert "part 1" in built.items[0].content and "part 1" not in built.items[1].content
    header = built.context.split("\n")[0]
    assert built.tokens_used == estimate_tokens(header) + sum(i.tokens for i in built.items)


def test_the_token_estimate_counts_a_token_per_cjk_character() -> None:
    """Four characters a token overshot the budget 2.6 times for Chinese and Japanese (MiniLM's
    tokenizer reads an ideograph or kana a token); alphabetic text keeps four a token."""
    from brain.server.domain.context import estimate_tokens

    assert estimate_tokens("") == 0 and estimate_tokens("a") == 1
    assert estimate_tokens("x" * 400) == 100
    assert estimate_tokens("年终奖什么时候发") == 8
    assert estimate_tokens("社員食堂のメニュー") == 9
    assert estimate_tokens("회의는 오후 3시") == 5 + 2  # five Hangul, 5 other characters
    assert estimate_tokens("deploy 年终奖") == 3 + 2  # 7 narrow -> 2, 3 wide
