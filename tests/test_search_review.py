"""An outside review of the lexical lanes' read paths (the read shared by both lanes, the
over-budget rule, scoring over the query's lexemes only): odd input scores as a recount,
the exact lane keeps its own rows, and no invisible row changes what a caller gets.

Real parts only: the session's embedded PostgreSQL and an in-process gRPC server.
"""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import timestamp_pb2

from brain.v1 import common_pb2, memory_pb2

from .conftest import BrainServer, unique
from .helpers import Api, search_params, tuned_writer
from .test_review import propose

LEXICAL = memory_pb2.SEARCH_MODE_LEXICAL


def scored(found: list[memory_pb2.SearchHit]) -> dict[str, tuple[float, float]]:
    return {h.memory.id: (h.lexical_score, h.exact_score) for h in found}


def ranked(found: list[memory_pb2.SearchHit]) -> list[tuple[str, float, float, int, int]]:
    return [
        (h.memory.id, h.lexical_score, h.exact_score, h.lexical_rank, h.exact_rank) for h in found
    ]


def now() -> timestamp_pb2.Timestamp:
    instant = timestamp_pb2.Timestamp()
    instant.GetCurrentTime()
    return instant


# --------------------------------------------------------------------------------------
# Correctness: odd input on every read path, scores equal to a recount
# --------------------------------------------------------------------------------------

ODD_ROWS = (
    "o'neil fixed the back\\slash bug",
    "see http://foo.com:8080/a'b?c=d\\e now",
    "path /usr/local/bin/x'y here",
    "naïve café Ünïcode words",
    "version 1.2.3 -5 +6 7e10 foo-bar_baz",
    "the runs were quick",
    "it's o''neil again",
)
LONG_QUERY = " ".join(f"w{i}" for i in range(300)) + " filler notes runs o'neil"
ODD_QUERIES = (
    "o'neil",
    "back\\slash",
    "http://foo.com:8080/a'b?c=d\\e",
    "/usr/local/bin/x'y",
    "a:b & c | !d <-> (e) :* runs",
    "café naïve",
    "'",
    "\\",
    "''''",
    "\\'\\'",
    "the of and",  # english: stop words only; simple: terms
    "the",
    "running",  # english 'run' has rows; simple 'running' has none
    "runs filler",
    "filler notes",  # unspecific
    "1.2.3 7e10 foo-bar",
    LONG_QUERY[:2000],
    "x" * 1999,  # one word longer than a lexeme may be
    "filler notes " + "z" * 1980,
)


async def test_odd_queries_on_every_read_path_score_as_a_recount(
    brain_server: BrainServer,
) -> None:
    """No query errors on any read path; with the default budget the kept-statistics scores
    equal the time-travel recount; with forced budgets every hit scores as with the default."""
    async with tuned_writer(brain_server) as (api, memories):
        for i in range(24):
            await api.save(f"filler notes {i} about the hangar doors running late")
        for text in ODD_ROWS:
            await api.save(text)
        instant = now()
        for query in ODD_QUERIES:
            kept = scored(await api.lexical(query))
            counted = scored(await api.lexical(query, time=common_pb2.TimeTravel(as_of=instant)))
            assert kept.keys() == counted.keys(), query
            for mid, (english, simple) in kept.items():
                assert english == pytest.approx(counted[mid][0], rel=1e-6), query
                assert simple == pytest.approx(counted[mid][1], rel=1e-6), query
            for params in ({"lexical_df_cap": 2, "candidates": 2},
                           {"lexical_df_cap": 2, "candidates": 1},
                           {"lexical_df_cap": 1, "candidates": 1}):  # fmt: skip
                with search_params(memories, **params):
                    forced = scored(await api.lexical(query))
                assert forced.keys() <= kept.keys(), (query, params)
                for mid, (english, simple) in forced.items():
                    # A lane that did not return the row reports 0; the other must agree.
                    if english:
                        assert english == pytest.approx(kept[mid][0], rel=1e-6), (query, params)
                    if simple:
                        assert simple == pytest.approx(kept[mid][1], rel=1e-6), (query, params)
            # Other statuses / time travel: the older path, same input must not fail.
            await api.lexical(
                query,
                filter=common_pb2.MemoryFilter(
                    statuses=[common_pb2.MEMORY_STATUS_ACTIVE, common_pb2.MEMORY_STATUS_SUPERSEDED]
                ),
            )
        # Controls: the odd rows are found by their odd words.
        assert scored(await api.lexical("o'neil"))
        assert scored(await api.lexical("http://foo.com:8080/a'b?c=d\\e"))


async def test_a_nul_character_in_the_query_is_not_an_internal_error(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """PostgreSQL text cannot hold NUL: the query must be refused or searched, not INTERNAL.
    (Not new with this change: the statistics statement already took $1 as text.)"""
    api = Api(channel, brain_server.mint_key(unique("t"), "w"), namespace=unique("ns"))
    await api.save("nul probe row")
    try:
        await api.lexical("nul\x00probe")
    except grpc.aio.AioRpcError as exc:
        assert exc.code() != grpc.StatusCode.INTERNAL, exc.details()


# --------------------------------------------------------------------------------------
# Correctness: the shared read of two unspecific lanes starves the exact lane
# --------------------------------------------------------------------------------------


async def test_both_lanes_unspecific_the_exact_lane_still_gets_its_own_rows(
    lexical_walled_server: BrainServer,
) -> None:
    """Query "running notes": english draws 'note' (every row), simple draws 'running'
    (the 20 older rows). Both lanes are unspecific, so `drawn` takes the newest 8 rows
    holding either term: all of them are the 20 newer "runs notes" rows, which do not hold
    'running'. Before the change the simple lane read the newest 8 rows holding
    'running'; now it reads none, so the exact lane (whose job is exact words) is empty
    although 20 visible rows hold the exact word."""
    async with tuned_writer(lexical_walled_server) as (api, memories):
        exact = {(await api.save(f"running notes {i}")).memory.id for i in range(20)}
        for i in range(20):
            await api.save(f"the runs notes {i}")
        # Control: with the default budget the exact lane finds the exact-word rows.
        full = await api.lexical("running notes")
        assert exact <= {h.memory.id for h in full if h.exact_score > 0}
        with search_params(memories, lexical_df_cap=2, candidates=2):
            found = await api.lexical("running notes")
        english = [h for h in found if h.lexical_score > 0]
        assert len(english) == 8  # the english lane got its 4 x candidates rows
        exact_hits = [h.memory.id for h in found if h.exact_score > 0]
        assert len(exact_hits) == 8, f"exact lane got {len(exact_hits)} of 20 visible rows"


# --------------------------------------------------------------------------------------
# Documented rule, questionable: the pair filling the budget hides the best row
# --------------------------------------------------------------------------------------


async def test_a_full_pair_hides_a_better_scoring_row_of_the_rarest_term(
    lexical_walled_server: BrainServer,
) -> None:
    """Over the budget with the pair full (4 rows at candidates=1), the rarest term's other
    rows are not read, even one that outscores every pair row (the rarest term three
    times, and a third query term). Pins the documented rule and shows what it costs:
    before the change that row (first in table order) was read and ranked first, as one
    arbitrary row among the first rows of the rarest term's posting list."""
    async with tuned_writer(lexical_walled_server) as (api, memories):
        best = (await api.save("kestrel kestrel kestrel osprey")).memory.id
        padding = " ".join(f"pad{j}" for j in range(30))
        pair = {(await api.save(f"kestrel heron {i} {padding}")).memory.id for i in range(4)}
        for i in range(110):
            await api.save(f"heron osprey filler {i}")
        for i in range(5):  # osprey more common than heron: the pair is kestrel & heron
            await api.save(f"osprey extra {i}")
        query = "kestrel heron osprey"
        with search_params(memories, lexical_df_cap=2, candidates=2):  # pair 4 < 8: rest read
            roomy = await api.lexical(query)
        # The best BM25 row overall (b = 0 by default: term frequency, not length, wins).
        assert max(roomy, key=lambda h: h.lexical_score).memory.id == best
        with search_params(memories, lexical_df_cap=2, candidates=1):  # pair 4 = 4: rest skipped
            full_pair = await api.lexical(query)
        english = {h.memory.id for h in full_pair if h.lexical_score > 0}
        assert english == pair
        assert best not in english  # the documented cost: the best row is not a candidate


# --------------------------------------------------------------------------------------
# Security: the new read paths and invisible rows
# --------------------------------------------------------------------------------------


async def test_new_read_paths_ignore_every_kind_of_invisible_row(
    lexical_walled_server: BrainServer,
) -> None:
    """Alice (user-, namespace- and session-confined, label team) searches through the
    shared within-budget read, the shared unspecific read and the pair path (both with room
    and with the pair count deciding). Newer rows she may not see, holding every query term
    (another user, namespace, session, label, tenant; another principal's proposal; a
    forgotten row; a superseded version) change neither her hits, scores, ranks nor which
    of her rows are candidates; her own forgotten/superseded rows never come back. Controls:
    she finds her own rows, and an unconfined writer sees the extra rows."""
    server, tenant, ns = lexical_walled_server, unique("t"), unique("ns")
    if server.running is None:
        pytest.skip("needs the in-process server")
    memories = server.running.memories
    rw = "memories:read,memories:write,memories:forget"
    async with grpc.aio.insecure_channel(server.target) as channel:
        alice = Api(channel, server.mint_key(tenant, "alice", user="alice", namespaces=(ns,),
                                             session="s-a", permissions=rw),
                    namespace=ns, user_id="alice", session_id="s-a")  # fmt: skip
        writer = Api(channel, server.mint_key(tenant, "writer", labels=("team", "hr"),
                                              permissions=rw), namespace=ns)  # fmt: skip
        proposer = Api(
            channel,
            server.mint_key(tenant, "proposer", permissions="memories:read,memories:propose"),
            namespace=ns,
        )
        stranger = Api(channel, server.mint_key(unique("t"), "eve"), namespace=ns)

        pair = {(await alice.save(f"zeppelin hangar pair {i}")).memory.id for i in range(2)}
        lone = (await alice.save("zeppelin alone in the sky")).memory.id
        quokka = {(await alice.save(f"quokka marmot {i}")).memory.id for i in range(2)}
        for i in range(60):
            await alice.save(f"filler note {i} about hangar doors")
        # Her own retired rows, made before the baseline (they change her N once).
        old = (await alice.save("zeppelin quokka filler note superseded")).memory.id
        await alice.save("plain replacement text", supersedes=[old])
        gone = (await alice.save("zeppelin quokka filler note forgotten")).memory.id
        await alice.forget(gone)

        cases = (
            ("quokka marmot", {"lexical_df_cap": 2, "candidates": 2}),  # shared, in budget
            ("filler note", {"lexical_df_cap": 2, "candidates": 2}),  # shared, unspecific
            ("zeppelin hangar", {"lexical_df_cap": 2, "candidates": 2}),  # pair, room left
            ("zeppelin hangar", {"lexical_df_cap": 2, "candidates": 1}),  # pair, count rule
            ("zeppelin hangar quokka marmot filler note", {}),  # default budget
        )

        async def snapshot() -> list[list[tuple[str, float, float, int, int]]]:
            out = []
            for query, params in cases:
                with search_params(memories, **params):
                    out.append(ranked(await alice.lexical(query)))
            return out

        before = await snapshot()
        seen_before = {r[0] for case in before for r in case}
        assert old not in seen_before and gone not in seen_before
        assert {r[0] for r in before[0]} == quokka  # controls: her own rows
        assert len(before[1]) == 8
        assert pair | {lone} <= {r[0] for r in before[2]}
        assert pair | {lone} <= {r[0] for r in before[3]}
        assert not await writer.lexical("invisible")

        text = "zeppelin hangar quokka marmot filler note invisible {i}"
        for i in range(6):
            t = text.format(i=i)
            await writer.save(t, scope=writer.scope(user_id="bob"))  # another user
            await writer.save(t, scope=writer.scope(namespace=unique("other")))
            await writer.save(t, scope=writer.scope(user_id="alice", session_id="s-b"))
            await writer.save(t, labels=["hr"])  # a label alice lacks
            await stranger.save(t)  # another tenant
            await propose(proposer, t)  # another principal's candidate
            f = (await writer.save(t + " forgotten", scope=writer.scope(user_id="bob"))).memory.id
            await writer.forget(f)
        # A superseded version of a row alice can see would change her N: supersede one
        # she cannot see (bob's) instead.
        b = (await writer.save(text.format(i=99), scope=writer.scope(user_id="bob"))).memory.id
        await writer.save("bob plain", scope=writer.scope(user_id="bob"), supersedes=[b])

        after = await snapshot()
        for (query, params), was, now_ in zip(cases, before, after, strict=True):
            assert now_ == was, (query, params)
        # Control: the unconfined writer sees the new rows (bob's, hr, other session) that
        # alice cannot; alice finds none of them by their own word.
        seen = await writer.lexical("invisible")
        assert len(seen) >= 18
        assert not await alice.lexical("invisible")
