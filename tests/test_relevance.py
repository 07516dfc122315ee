"""The learned fusion and the relevance floor: the models' fitting, and the floor on a server."""

from __future__ import annotations

import math
import secrets
import string
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest

from brain.server.domain.retrieval.relevance import (
    FEATURES,
    HYBRID_MODEL,
    LEXICAL_MODEL,
    LaneView,
    RelevanceModel,
    feature_rows,
    fit_order,
    fit_relevance,
)
from brain.server.measure import crossval
from brain.v1 import memory_pb2

from .conftest import BrainServer, unique
from .helpers import Api

LEXICAL = memory_pb2.SEARCH_MODE_LEXICAL


def lanes(lexical: float = 0.0, rank: int = 0, session: str = "s", **kw: float) -> LaneView:
    values = {
        "exact_score": 0.0,
        "exact_rank": 0,
        "semantic_similarity": 0.0,
        "semantic_rank": 0,
    }
    values.update(kw)
    return LaneView(
        lexical_score=lexical,
        lexical_rank=rank,
        exact_score=float(values["exact_score"]),
        exact_rank=int(values["exact_rank"]),
        semantic_similarity=float(values["semantic_similarity"]),
        semantic_rank=int(values["semantic_rank"]),
        session=session,
    )


def test_features_are_in_units_of_one_rare_term_whatever_the_bucket_size() -> None:
    """A term found in one row of N scores 1 unit at N = 3 and at N = 10,000; gaps, ranks
    and session support are read against the query's other hits."""
    col = {name: i for i, name in enumerate(FEATURES)}
    for n in (3, 10_000):
        one_rare = math.log1p((n - 0.5) / 1.5)  # BM25 (k1 = 1, b = 0) of a df = 1 term, tf 1
        rows = feature_rows(
            [lanes(2 * one_rare, 1, "a"), lanes(one_rare, 2, "a"), lanes(0.0, 0, "b")], n
        )
        assert rows[:, col["lexical"]] == pytest.approx([2.0, 1.0, 0.0])
        assert rows[:, col["lexical_gap"]] == pytest.approx([0.0, 1.0, 2.0])
        assert rows[:, col["lexical_rr"]] == pytest.approx([1.0, 0.5, 0.0])
        assert rows[:, col["session"]] == pytest.approx([0.5, 0.5, 0.0])
        # The best lexical rank among the *other* hits of the session.
        assert rows[:, col["session_lexical"]] == pytest.approx([0.5, 1.0, 0.0])
    assert feature_rows([], 10).shape == (0, len(FEATURES))


def test_session_features_read_each_hits_other_hits_of_its_session() -> None:
    """Hits of one session (a bulk import can put every hit in one), hits absent from the
    lexical lane among them: each hit's share of other hits from its session and the best
    1 / lexical rank among those others, as counted hit by hit."""
    col = {name: i for i, name in enumerate(FEATURES)}
    ranks = [3, 0, 1, 0, 7, 2, 0, 5, *range(8, 60)]  # 0: not found lexically
    sessions = [*"aaabbaca", *"a" * 52]
    hits = [lanes(1.0 / (r or 99), r, s) for r, s in zip(ranks, sessions, strict=True)]
    rows = feature_rows(hits, 1000)
    for i, session in enumerate(sessions):
        others = [
            1.0 / r if r else 0.0
            for j, (r, s) in enumerate(zip(ranks, sessions, strict=True))
            if j != i and s == session
        ]
        assert rows[i, col["session"]] == pytest.approx(len(others) / (len(hits) - 1))
        assert rows[i, col["session_lexical"]] == pytest.approx(max(others, default=0.0))
    # The positive controls: a best hit reads its session's second best, a lone hit nothing.
    assert rows[2, col["session_lexical"]] == pytest.approx(1 / 2)
    assert rows[6, col["session"]] == 0.0 and rows[6, col["session_lexical"]] == 0.0


def test_fit_order_learns_which_feature_ranks_the_evidence_first() -> None:
    """Queries whose evidence always has the best lexical rank but a random similarity:
    the listwise fit weighs lexical_rr up, and the absolute lexical score not at all."""
    rng = np.random.default_rng(7)
    col = {name: i for i, name in enumerate(FEATURES)}
    queries = []
    for _ in range(40):
        x = np.zeros((5, len(FEATURES)))
        x[:, col["lexical_rr"]] = 1.0 / np.arange(1, 6)
        x[:, col["semantic"]] = rng.uniform(0.2, 0.8, 5)
        x[:, col["lexical"]] = rng.uniform(0, 3)  # the same for every hit of the query
        y = np.zeros(5)
        y[0] = 1.0
        queries.append((x, y))
    order = fit_order(queries)
    assert order[col["lexical_rr"]] > 1.0
    assert abs(order[col["semantic"]]) < order[col["lexical_rr"]] / 4
    assert order[col["lexical"]] == 0.0  # left out: it only shifts a whole query


def test_fit_relevance_is_calibrated_on_what_it_was_fitted_on() -> None:
    """Labels drawn with P = sigmoid(-3 + 2 * lexical): the fit finds about those
    coefficients, and predicted probabilities average to the observed share."""
    rng = np.random.default_rng(11)
    x = np.zeros((4000, len(FEATURES)))
    x[:, 0] = rng.uniform(0, 3, 4000)
    y = (rng.uniform(size=4000) < 1 / (1 + np.exp(3 - 2 * x[:, 0]))).astype(float)
    weights, bias = fit_relevance(x, y, l2=0.01)
    assert weights[0] == pytest.approx(2.0, abs=0.3) and bias == pytest.approx(-3.0, abs=0.4)
    model = RelevanceModel(order=(0.0,) * len(FEATURES), weights=weights, bias=bias, floor=0)
    assert float(model.probabilities(x).mean()) == pytest.approx(float(y.mean()), abs=0.01)


@dataclass
class Search:
    """A `crossval.Searched` written by hand: one candidate per turn."""

    conversation: int
    evidence: frozenset[str]
    turns: list[frozenset[str]]
    lexical: list[float]
    features: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = 1000
        unit = math.log1p((n - 0.5) / 1.5)
        self.features = feature_rows(
            [lanes(v * unit, i + 1, f"s{i}") for i, v in enumerate(self.lexical)], n
        )


def test_the_floor_is_the_highest_that_costs_at_most_the_tolerance() -> None:
    """Answerable questions match strongly (2-3 rare terms) except one; silent ones weakly
    (0.5): the chosen floor silences the weak searches, and with no tolerance it keeps
    every answerable question's recall. The held-out side of that choice is `ranked`."""
    answerable = [
        Search(c, frozenset({"e"}), [frozenset({"e"}), frozenset({"x"})], [strong, 0.4])
        for c in range(3)
        for strong in (2.0, 2.5, 3.0)
    ]
    weak_answer = Search(0, frozenset({"e"}), [frozenset({"e"})], [0.6])
    silent = [Search(c, frozenset(), [frozenset({"x"})], [0.5]) for c in range(3)]
    train = [*answerable, weak_answer, *silent]
    strict = crossval.fit_model(train, tolerance=0.0)
    assert all(crossval.ranked(s, strict, strict.floor, learned=True) for s in train if s.evidence)
    lenient = crossval.fit_model(train, tolerance=0.2)
    assert lenient.floor > strict.floor
    assert not any(crossval.ranked(s, lenient, lenient.floor, learned=True) for s in silent)
    assert all(crossval.ranked(s, lenient, lenient.floor, learned=True) for s in answerable)


def test_the_shipped_models_read_every_feature_and_floor_in_range() -> None:
    """The pasted coefficients have one weight per feature and a floor in (0, 1)."""
    for model in (LEXICAL_MODEL, HYBRID_MODEL):
        assert len(model.order) == len(model.weights) == len(FEATURES)
        assert 0 < model.floor < 1


def word() -> str:
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(12))


async def _bucket(api: Api, rows: int = 50) -> list[tuple[str, str, str]]:
    """``rows`` deploy notes sharing "service restarted", each with two words of its own."""
    saved = []
    for i in range(rows):
        a, b = word(), word()
        memory = (await api.save(f"Deploy {i}: the {a} {b} service restarted")).memory
        saved.append((memory.id, a, b))
    return saved


async def _search(api: Api, query: str, **kw: object) -> memory_pb2.SearchMemoriesResponse:
    response: memory_pb2.SearchMemoriesResponse = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(scope=api.scope(), query=query, mode=LEXICAL, **kw),
        metadata=api.md,
    )
    return response


async def test_a_query_that_matches_only_common_words_stays_silent(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """In a bucket of 50 notes, words in every note answer nothing (below_floor says what
    was withheld), words of one note find it; min_relevance 0 turns the floor off."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    saved = await _bucket(api)
    memory_id, a, b = saved[17]

    found = await _search(api, f"which {a} {b} service?")
    assert found.hits and found.hits[0].memory.id == memory_id  # the positive control
    assert found.hits[0].relevance >= LEXICAL_MODEL.floor and found.below_floor == 0

    weak = await _search(api, "service restarted", limit=5)
    assert list(weak.hits) == [] and weak.below_floor == 5
    everything = await _search(api, "service restarted", limit=5, min_relevance=0.0)
    assert len(everything.hits) == 5 and everything.below_floor == 0
    assert max(h.relevance for h in everything.hits) < found.hits[0].relevance
    # A caller may ask for a stricter floor than the server's.
    assert list((await _search(api, f"{a} {b}", min_relevance=0.99)).hits) == []


async def test_a_small_bucket_answers_without_the_default_floor(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Below floor_min_rows a term's rarity means little: three notes all saying "alpha"
    are all found by "alpha", though "alpha" is common among them."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    for text in ("alpha report", "alpha memo", "alpha note"):
        await api.save(text)
    assert len(await api.search("alpha", mode=LEXICAL)) == 3


@pytest.mark.parametrize("value", [1.5, -0.1, float("nan")])
async def test_min_relevance_outside_0_to_1_is_invalid_argument(
    brain_server: BrainServer, channel: grpc.aio.Channel, value: float
) -> None:
    """A floor outside 0..1 is INVALID_ARGUMENT naming min_relevance; the same search
    with a valid floor answers."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"))
    await api.save("floor check")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.search("floor", min_relevance=value)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "min_relevance" in (err.value.details() or "")
    assert len(await api.search("floor", min_relevance=0.0)) == 1


def test_learned_fusion_orders_by_the_model_and_sets_every_relevance() -> None:
    """With the shipped (learned) fusion, a row both lexical lanes rank first leads, and
    every hit carries a relevance in (0, 1) that grows with its own BM25 strength."""
    from datetime import UTC, datetime

    from brain.server.domain.retrieval.lanes import LaneHit, RetrievalParams, fuse

    def row(name: str) -> dict[str, object]:
        now = datetime(2026, 1, 1, tzinfo=UTC)
        return {"memory_id": name, "version": 1, "importance": 0.5, "recorded_at": now}

    unit = math.log1p((100 - 0.5) / 1.5)
    lexical = [LaneHit(row("both"), 3 * unit), LaneHit(row("lex"), 1 * unit)]
    exact = [LaneHit(row("both"), 2 * unit), LaneHit(row("exact"), 0.5 * unit)]
    hits = fuse(lexical, [], None, RetrievalParams(), exact=exact, corpus_size=100)
    assert hits[0].row["memory_id"] == "both"
    assert all(0 < h.relevance < 1 for h in hits)
    by_name = {h.row["memory_id"]: h.relevance for h in hits}
    assert by_name["both"] > by_name["lex"] > by_name["exact"]
