"""Search at team scale: no side channel through scores, term statistics kept per cell."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import timestamp_pb2

from brain.authz import Confinement
from brain.server.domain.retrieval import lanes
from brain.server.domain.retrieval.lanes import RetrievalParams, plan_lane
from brain.v1 import common_pb2, memory_pb2

from .conftest import BrainServer, unique
from .helpers import Api, search_params, tuned_writer
from .test_review import decide, propose

QUERY = "zeppelin hangar maintenance"
OWN = (
    "the zeppelin hangar needs maintenance on friday",
    "hangar doors were painted blue",
    "maintenance schedule for the zeppelin crew",
    "the zeppelin flies over the harbour",
)
# Rows that would shift IDF and corpus size if they leaked into a caller's statistics.
INVISIBLE = "zeppelin zeppelin hangar report number {i}"


async def ranked(api: Api, mode: int) -> list[tuple[str, float, float]]:
    """(id, fused score, BM25 score) of every hit, best first; the fused score is rounded
    because its recency boost drifts by ~1e-8 while the test runs."""
    response = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(scope=api.scope(), query=QUERY, limit=20, mode=mode),
        metadata=api.md,
    )
    return [(h.memory.id, round(h.score, 5), h.lexical_score) for h in response.hits]


async def test_scores_and_order_ignore_rows_the_caller_cannot_see(
    walled_server: BrainServer,
) -> None:
    """Rows of another user, namespace, label or tenant holding the query's terms change
    neither the scores nor the order a caller gets; a caller who can see them gets other
    scores (the positive control)."""
    server, tenant, namespace = walled_server, unique("t"), unique("ns")
    async with grpc.aio.insecure_channel(server.target) as channel:
        alice = Api(
            channel,
            server.mint_key(tenant, "alice", user="alice", namespaces=(namespace,)),
            namespace=namespace,
            user_id="alice",
        )
        writer = Api(
            channel, server.mint_key(tenant, "writer", labels=("team", "hr")), namespace=namespace
        )
        stranger = Api(channel, server.mint_key(unique("t"), "eve"), namespace=namespace)
        own = [(await alice.save(text)).memory.id for text in OWN]
        modes = (memory_pb2.SEARCH_MODE_LEXICAL, memory_pb2.SEARCH_MODE_HYBRID)
        before = {mode: await ranked(alice, mode) for mode in modes}
        assert {hit[0] for hit in before[memory_pb2.SEARCH_MODE_LEXICAL]} == set(own)
        seen_by_writer = await ranked(writer, memory_pb2.SEARCH_MODE_LEXICAL)

        for i in range(15):
            text = INVISIBLE.format(i=i)
            await writer.save(text, scope=writer.scope(user_id="bob"))  # another user
            await writer.save(text, scope=writer.scope(namespace=unique("other")))
            await writer.save(text, labels=["hr"])  # a label alice does not hold
            await stranger.save(text)  # another tenant

        after = {mode: await ranked(alice, mode) for mode in modes}
        assert after == before
        # Positive control: the writer sees the hr-labelled and bob's rows in this namespace.
        now_seen = await ranked(writer, memory_pb2.SEARCH_MODE_LEXICAL)
        assert len(now_seen) > len(seen_by_writer)
        shared = {hit[0]: hit[2] for hit in seen_by_writer}
        assert any(shared.get(hit[0], hit[2]) != hit[2] for hit in now_seen)


def term_counts(server: BrainServer, tenant: str) -> dict[tuple[str, str, tuple[str, ...]], int]:
    """The tenant's kept statistics per (config, lexeme, label set), shards summed."""
    rows = server.sql(
        """SELECT s.config, s.lexeme, c.labels, sum(s.df)::int AS df, sum(s.total_length)::int
                  AS total_length
           FROM lexical_terms s JOIN lexical_cells c USING (tenant_id, cell_id)
           JOIN tenants t USING (tenant_id) WHERE t.name = $1
           GROUP BY 1, 2, 3""",
        tenant,
    )
    return {(r["config"], r["lexeme"], tuple(r["labels"])): (r["df"], r["total_length"])
            for r in rows}  # fmt: skip


async def test_term_statistics_follow_every_write_and_match_a_recount(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Saves, updates, relabels, supersedes, approvals and forgets keep the per-cell counts
    equal to a recount from the rows; a forgotten word leaves no row behind."""
    tenant = unique("t")
    api = Api(channel, brain_server.mint_key(
        tenant, "writer", labels=("team", "hr"),
        permissions="memories:read,memories:write,memories:forget,memories:propose",
    ))  # fmt: skip
    reviewer = Api(channel, brain_server.mint_key(
        tenant, "reviewer", permissions="memories:read,memories:review", labels=("team", "hr")
    ))  # fmt: skip
    first = (await api.save("the falcon nests on the tower")).memory.id
    second = (await api.save("the falcon hunts pigeons")).memory.id
    third = (await api.save("ospreyword only lives here")).memory.id
    assert term_counts(brain_server, tenant)[("english", "falcon", ("team",))] == (2, 0)
    assert term_counts(brain_server, tenant)[("english", "", ("team",))] == (3, 8)  # lexemes

    await api.update(first, ["content"], content="the falcon left the tower for good")
    await api.update(second, ["labels"], labels=["hr"])  # moves to another cell
    await api.save("pigeons are back", supersedes=[first])
    candidate = await propose(api, "the kestrel hovers")
    await decide(reviewer, candidate.id, approve=True)
    await api.forget(third)

    kept = term_counts(brain_server, tenant)
    assert kept[("english", "falcon", ("hr",))] == (1, 0)
    assert ("english", "falcon", ("team",)) not in kept  # the superseded one left the count
    assert not [key for key in kept if "ospreyword" in key[1]]  # erased with its memory
    brain_server.sql(
        "SELECT brain_rebuild_lexical_stats(tenant_id) FROM tenants WHERE name = $1", tenant
    )
    assert term_counts(brain_server, tenant) == kept


async def test_row_level_security_shows_only_the_cells_a_key_may_see(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Read as the app role with the application's predicate out of the picture, a key sees
    the statistics of its own cells (positive control) and none of another label's, another
    user's or another tenant's; the app role cannot write them."""
    tenant, other_tenant, namespace = unique("t"), unique("t"), unique("ns")
    writer = Api(channel, brain_server.mint_key(tenant, "w", labels=("team", "hr")), namespace)
    stranger = Api(channel, brain_server.mint_key(other_tenant, "s"), namespace)
    await writer.save("zeppelin shared with the team")
    await writer.save("zeppelin for hr only", labels=["hr"])
    await writer.save("zeppelin of bob", scope=writer.scope(user_id="bob"))
    await stranger.save("zeppelin elsewhere")
    (tenant_id,) = [r[0] for r in brain_server.sql(
        "SELECT tenant_id::text FROM tenants WHERE name = $1", tenant)]  # fmt: skip
    assert brain_server.running is not None
    db = brain_server.running.db

    async def seen() -> tuple[set[tuple[str, tuple[str, ...]]], int]:
        async with db.tenant_tx(
            tenant_id, labels=frozenset({"team"}), confinement=Confinement(user_id="alice")
        ) as conn:
            cells = {(r["user_id"], tuple(r["labels"])) for r in await conn.fetch(
                "SELECT user_id, labels FROM lexical_cells")}  # fmt: skip
            df = await conn.fetchval(
                "SELECT sum(df) FROM lexical_terms WHERE config = 'english' AND lexeme = 'zeppelin'"
            )
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute("UPDATE lexical_terms SET df = df + 1")
            return cells, df

    cells, df = brain_server.loop.run(seen())
    assert cells == {("", ("team",))}  # its own cell only: not hr, not bob, not the stranger's
    assert df == 1


def test_lane_plans_draw_rare_terms_first_within_the_budget() -> None:
    """Which candidates each lane reads, from the visible statistics alone."""
    params = RetrievalParams(lexical_df_cap=10)
    rows = ("", 100.0, 800.0)
    rare = plan_lane("english", [rows, ("zeppelin", 3.0, 0), ("hangar", 8.0, 0)], params)
    assert (rare.draw, rare.common, rare.over_budget) == ("'zeppelin'", False, False)
    both = plan_lane("english", [rows, ("zeppelin", 3.0, 0), ("hangar", 4.0, 0)], params)
    assert both.draw == "'zeppelin' | 'hangar'" and not both.pair
    over = plan_lane("english", [rows, ("zeppelin", 4.0, 0), ("hangar", 6.0, 0)],
                     RetrievalParams(lexical_df_cap=3))  # fmt: skip
    assert (over.over_budget, over.common, over.pair) == (True, False, "'zeppelin' & 'hangar'")
    common = plan_lane("english", [rows, ("the", 90.0, 0)], params)
    assert common.common and common.draw == "'the'"
    assert plan_lane("english", [rows, ("o'neil\\x", 1.0, 0)], params).draw == "'o''neil\\\\x'"
    assert [w for w, _ in rare.weights] == ["zeppelin", "hangar"]  # every term weighs
    assert rare.weights[0][1] > rare.weights[1][1] > 0  # rarer weighs more
    assert (rare.n, rare.avgdl) == (100.0, 8.0)


async def test_budget_paths_ignore_rows_the_caller_cannot_see(
    lexical_walled_server: BrainServer,
) -> None:
    """Over the budget (the rarest term's rows holding the next rarest first) and
    unspecific (the newest rows holding the rarest term): a caller's hits, scores and
    order still ignore rows it cannot see, and it finds its own rows (the control)."""
    server = lexical_walled_server
    if server.running is None:
        pytest.skip("needs the in-process server to set a small candidate budget")
    tenant, namespace = unique("t"), unique("ns")
    with search_params(server.running.memories, lexical_df_cap=2, candidates=2):
        async with grpc.aio.insecure_channel(server.target) as channel:
            alice = Api(
                channel, server.mint_key(tenant, "alice", user="alice", namespaces=(namespace,)),
                namespace=namespace, user_id="alice",
            )  # fmt: skip
            writer = Api(channel, server.mint_key(tenant, "writer"), namespace=namespace)
            pair = [(await alice.save(f"zeppelin hangar pair {i}")).memory.id for i in range(2)]
            lone = (await alice.save("zeppelin alone in the sky")).memory.id
            for i in range(60):
                await alice.save(f"filler note {i} about hangar doors")

            async def both(query: str) -> list[tuple[str, float, float]]:
                hits = await alice.lexical(query)
                return [(h.memory.id, round(h.score, 5), h.lexical_score) for h in hits]

            # zeppelin: 3 rows, over the budget of 2, in under a twentieth of 63.
            over = await both("zeppelin hangar")
            assert {hit[0] for hit in over[:2]} == set(pair) and lone in {h[0] for h in over}
            # filler: in 60 of 63 rows, an unspecific query: 4 x candidates newest rows.
            common = await both("filler note")
            assert len(common) == 8
            for _ in range(10):
                await writer.save("zeppelin hangar filler note", scope=writer.scope(user_id="bob"))
            assert await both("zeppelin hangar") == over
            assert await both("filler note") == common
            # Control: the writer sees bob's rows, and they come first for it.
            seen = await writer.lexical("filler note")
            assert "bob" in {h.memory.scope.user_id for h in seen}


async def test_over_the_budget_the_rarest_terms_rows_come_only_to_fill_the_pair(
    lexical_walled_server: BrainServer,
) -> None:
    """Over the budget, the rows holding the two rarest terms come first; the rarest term's
    other rows are read only while those are fewer than 4 x candidates (its whole posting
    list is never read just to be cut)."""
    async with tuned_writer(lexical_walled_server) as (api, memories):
        # The lone row first: read in table order, the rarest term's rows would start with it.
        lone = (await api.save("kestrel alone on the cliff")).memory.id
        pair = {(await api.save(f"kestrel heron pair {i}")).memory.id for i in range(5)}
        for i in range(121):  # kestrel: 6 rows, over a budget of 2, under a twentieth
            await api.save(f"filler heron note {i}")

        async def found(candidates: int) -> set[str]:
            with search_params(memories, lexical_df_cap=2, candidates=candidates):
                return {h.memory.id for h in await api.lexical("kestrel heron")}

        # 8 candidates: the 5 pair rows, then the rarest term's other row fills in.
        eight = await found(2)
        assert eight == pair | {lone}
        # 4 candidates: the pair alone fills them; the lone row is not read.
        four = await found(1)
        assert len(four) == 4 and four <= pair


async def test_kept_statistics_score_every_read_path_exactly(
    lexical_walled_server: BrainServer,
) -> None:
    """Each way the lexical lanes read candidates (rare terms through the GIN index, both
    lanes in one pass; an unspecific query's newest rows, both lanes in one pass) gives
    every hit the BM25 score a recount gives: the same as a search of the same instant
    through time travel, which counts document frequencies over the rows themselves."""
    server = lexical_walled_server
    if server.running is None:
        pytest.skip("needs the in-process server to set a small candidate budget")
    memories = server.running.memories
    namespace = unique("ns")
    api = Api(channel := grpc.aio.insecure_channel(server.target),
              server.mint_key(unique("t"), "w"), namespace=namespace)  # fmt: skip
    try:
        for i in range(24):
            await api.save(f"filler notes {i} about the hangar doors running late")
        for text in ("zeppelin hangar runs", "the zeppelins were running", "zeppelin crew notes"):
            await api.save(text)

        async def scores(query: str, **time: Any) -> dict[str, tuple[float, float]]:
            hits = await api.lexical(query, time=common_pb2.TimeTravel(**time))
            return {h.memory.id: (h.lexical_score, h.exact_score) for h in hits}

        instant = timestamp_pb2.Timestamp()
        instant.GetCurrentTime()
        for query in ("zeppelin hangar running", "filler notes", "zeppelins run"):
            kept, counted = await scores(query), await scores(query, as_of=instant)
            assert kept and kept.keys() == counted.keys()
            for memory_id, (english, simple) in kept.items():
                assert english == pytest.approx(counted[memory_id][0], rel=1e-6)
                assert simple == pytest.approx(counted[memory_id][1], rel=1e-6)
        # Unspecific (every term in over a twentieth of the rows and over a budget of 2):
        # the 8 newest rows holding the rarest term, each scored as the full read scores it.
        full = await scores("filler notes")
        with search_params(memories, lexical_df_cap=2, candidates=2):
            newest = await scores("filler notes")
        assert len(newest) == 8 and newest.keys() <= full.keys()
        assert all(newest[m] == pytest.approx(full[m], rel=1e-6) for m in newest)
    finally:
        await channel.close()


async def search_with_a_write_between(
    api: Api, query: str, write: Callable[[], Awaitable[Any]], monkeypatch: pytest.MonkeyPatch
) -> memory_pb2.SearchMemoriesResponse:
    """A lexical search during which ``write`` commits after ranking and before the hits
    are read in full (`lanes.shown`): the gap between a search's two reads."""
    test_loop = asyncio.get_running_loop()
    original, fired = lanes.shown, []

    async def racing(conn: Any, v: Any, hits: Any) -> Any:
        if not fired:
            fired.append(True)
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(write(), test_loop))
        return await original(conn, v, hits)

    monkeypatch.setattr(lanes, "shown", racing)
    response = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(
            scope=api.scope(), query=query, limit=10, min_relevance=0,
            mode=memory_pb2.SEARCH_MODE_LEXICAL,
        ),
        metadata=api.md,
    )  # fmt: skip
    assert fired
    return response


async def test_a_write_between_ranking_and_reading_the_hits_is_not_mixed_in(
    brain_server: BrainServer, channel: grpc.aio.Channel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search reads one snapshot: an update or a forget committed between its ranking and
    its reading of the hits neither shows a retired version nor a half-forgotten memory
    (found by an outside review: the hits came back as the replaced version, or ACTIVE with
    empty content)."""
    if brain_server.running is None:
        pytest.skip("needs the in-process server to widen the gap")
    api = Api(channel, brain_server.mint_key(
        unique("t"), "w", permissions="memories:read,memories:write,memories:forget"))  # fmt: skip
    first = (await api.save("basilisk first wording")).memory
    found = await search_with_a_write_between(
        api, "basilisk",
        lambda: api.update(first.id, ["content"], content="basilisk second wording"),
        monkeypatch,
    )  # fmt: skip
    # The search answers as of its start: the version it ranked, current then.
    assert [(h.memory.id, h.memory.version, h.memory.content) for h in found.hits] == [
        (first.id, 1, "basilisk first wording")
    ]
    assert not found.hits[0].memory.HasField("retired_at")

    secret = (await api.save("manticore secret wording")).memory
    public = (await api.save("manticore public wording")).memory
    monkeypatch.undo()
    found = await search_with_a_write_between(
        api, "manticore", lambda: api.forget(secret.id), monkeypatch
    )
    shown = {h.memory.id: h.memory.content for h in found.hits}
    assert shown[public.id] == "manticore public wording"  # control
    assert all(content for content in shown.values()), shown  # never half-forgotten
    # After the forget committed, the next search no longer finds it.
    monkeypatch.undo()
    after = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(
            scope=api.scope(), query="manticore", limit=10, min_relevance=0,
            mode=memory_pb2.SEARCH_MODE_LEXICAL,
        ),
        metadata=api.md,
    )  # fmt: skip
    assert [h.memory.id for h in after.hits] == [public.id]
