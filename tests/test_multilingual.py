# ruff: noqa: RUF001  (full-width punctuation: the texts are Chinese and Japanese)
"""Every script matches lexically, function words weigh nothing, and the relevance floor
holds when the lexical lanes find nothing (issue 34).

Lexical behaviour is exact (BM25 over the pipeline's lexemes), so these tests assert it
exactly; where a semantic lane takes part, the stored vectors are set by the test.
"""

from __future__ import annotations

import asyncio
import math

import grpc
import pytest

from brain.server.domain.retrieval.lanes import RetrievalParams, plan_lane, share
from brain.server.domain.retrieval.relevance import HYBRID_MODEL
from brain.server.domain.retrieval.routing import parse_tenant_embedders
from brain.server.measure import multilingual
from brain.v1 import memory_pb2

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
from .helpers import Api
from .test_knowledge import found_paths, put, session_filler_held
from .test_search_scale import term_counts

LEXICAL = memory_pb2.SEARCH_MODE_LEXICAL
KB = "memories:read,memories:write,memories:forget,knowledge:read,knowledge:write"


def lexemes(server: BrainServer, config: str, text: str) -> set[str]:
    rows = server.sql(
        "SELECT unnest(tsvector_to_array(brain_tsv($1::regconfig, $2))) AS l", config, text
    )
    return {r["l"] for r in rows}


def test_unspaced_scripts_are_read_as_bigrams_split_at_function_words(
    brain_server: BrainServer,
) -> None:
    """Chinese, Japanese, Thai and Korean runs become overlapping bigrams (Thai: of letter
    clusters); particles and function characters split a run and are dropped."""
    assert lexemes(brain_server, "simple", "会议改到了下午三点。") == {
        "会议", "议改", "改到", "下午", "午三", "三点"
    }  # fmt: skip
    # "の" and "は" split the run; "です" and a lone "か" are function words.
    assert lexemes(brain_server, "simple", "スプリントのレビューは金曜日です") == {
        "スプ", "プリ", "リン", "ント", "レビ", "ビュ", "ュー", "金曜", "曜日"
    }  # fmt: skip
    assert lexemes(brain_server, "simple", "ทีมย้ายไปเชียงใหม่") >= {"ทีม", "เชีย", "ใหม่"}
    # Korean keeps spaces between words; a particle stays inside its word's bigrams.
    assert lexemes(brain_server, "simple", "회의는 오후") == {"회의", "의는", "오후"}
    assert lexemes(brain_server, "simple", "회의") == {"회의"}
    # Spaced scripts are read as before.
    assert lexemes(brain_server, "english", "Deploys failed") == {"deploy", "fail"}


def test_function_words_weigh_nothing_in_their_language_only(brain_server: BrainServer) -> None:
    """Spanish, Hindi and Arabic function words are dropped from both vectors; English words
    that are function words elsewhere ("son", "hat", "die") stay when the text is English."""
    spanish = "La reunión de la semana se movió a las tres de la tarde"
    for config in ("simple", "english"):
        kept = lexemes(brain_server, config, spanish)
        assert not kept & {"la", "de", "se", "a", "las"}
        assert {"semana", "tres"} <= kept
    assert lexemes(brain_server, "simple", "बैठक की तारीख सोमवार को है") == {
        "बैठक", "तारीख", "सोमवार"
    }  # fmt: skip
    assert "في" not in lexemes(brain_server, "simple", "الخادم الرئيسي في دبي")
    english = lexemes(brain_server, "simple", "My son will die laughing at the hat")
    assert {"son", "die", "hat", "laughing"} <= english
    # German stop words go when the text is German ("die" among them).
    assert "die" not in lexemes(
        brain_server, "simple", "Die Besprechung ist am Montag und nicht am"
    )


async def test_every_language_of_the_set_is_found_lexically_in_one_namespace(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The multilingual set's memories in one namespace: in lexical mode each question
    that shares a content word with its answer ranks it first, and no hit ever comes from
    another language (a Spanish "de la" or a Hindi "की" matches nothing)."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"), namespace=unique("ml"))
    languages = multilingual.load()
    which: dict[str, tuple[str, int]] = {}
    for lang in languages:
        for n, content in enumerate(lang.memories, 1):
            which[(await api.save(content)).memory.id] = (lang.code, n)
    firsts = 0
    for lang in languages:
        for q in lang.questions:
            ranked = [which[i] for i in await api.search(q.text, limit=5, mode=LEXICAL)]
            assert all(code == lang.code for code, _ in ranked), (q.text, ranked)
            if q.answer is not None and ranked and ranked[0] == (lang.code, q.answer):
                firsts += 1
    # The reworded questions that share no word with their answer are the rest.
    assert firsts >= 40, firsts


async def test_a_mixed_namespace_gives_spanish_and_hindi_function_words_no_weight(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A memory made of little but function words is never a lexical hit; the memory
    holding the question's content word is (the positive control)."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"), namespace=unique("ml"))
    filler = (await api.save("La casa de la madre de los niños de la escuela")).memory.id
    hindi_filler = (await api.save("यह उस की बात है जो में था और वह भी")).memory.id
    answer = (await api.save("El servidor principal está en Madrid")).memory.id
    hindi_answer = (await api.save("मुख्य सर्वर मुंबई में है")).memory.id
    for i in range(5):
        await api.save(f"Note {i} about the English release train")
    assert await api.search("¿Dónde está el servidor de la empresa?", mode=LEXICAL) == [answer]
    assert await api.search("मुख्य सर्वर कहाँ है?", mode=LEXICAL) == [hindi_answer]
    # Questions that share only function words with the fillers find nothing.
    assert await api.search("¿Es de la empresa de los que se fueron?", mode=LEXICAL) == []
    assert await api.search("वह क्या था और कब?", mode=LEXICAL) == []
    # The fillers' own content words find them (positive controls).
    assert await api.search("¿La casa de la madre?", mode=LEXICAL) == [filler]
    assert await api.search("उस की बात", mode=LEXICAL) == [hindi_filler]


async def test_a_small_bucket_answers_no_stop_word_match(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Under floor_min_rows (the default floor is off there), a question sharing only
    function words with a memory ("with", "my"; "de", "la") still finds nothing; its
    content word finds it (the control)."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"), namespace=unique("s"))
    coffee = (await api.save("Had coffee with Alex")).memory.id
    reunion = (await api.save("La reunión de la mañana")).memory.id
    assert await api.search("wake me up with my recent important memories", mode=LEXICAL) == []
    assert await api.search("¿Qué es de la vida?", mode=LEXICAL) == []
    assert await api.search("coffee", mode=LEXICAL) == [coffee]
    assert await api.search("¿Cuándo es la reunión?", mode=LEXICAL) == [reunion]


async def test_term_statistics_of_segmented_text_match_a_recount(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Saves, updates and forgets of Chinese and Japanese memories keep the per-cell counts
    of their bigrams equal to a recount from the rows."""
    tenant = unique("t")
    api = Api(channel, brain_server.mint_key(
        tenant, "writer", permissions="memories:read,memories:write,memories:forget"
    ))  # fmt: skip
    first = (await api.save("会议改到下午三点")).memory.id
    await api.save("会议室在三楼")
    third = (await api.save("金曜日の会議")).memory.id
    assert term_counts(brain_server, tenant)[("simple", "会议", ("team",))] == (2, 0)
    await api.update(first, ["content"], content="培训改到周五")
    await api.forget(third)
    kept = term_counts(brain_server, tenant)
    assert kept[("simple", "会议", ("team",))] == (1, 0)
    assert kept[("simple", "培训", ("team",))] == (1, 0)
    assert not [key for key in kept if key[1] in ("金曜", "曜日")]  # left with its memory
    brain_server.sql(
        "SELECT brain_rebuild_lexical_stats(tenant_id) FROM tenants WHERE name = $1", tenant
    )
    assert term_counts(brain_server, tenant) == kept


async def test_knowledge_chunks_are_segmented_like_memories(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A Chinese or Thai document is found by a question in its language (lexical only);
    the other document is not."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=KB))
    await put(api, "zh.md", "# 部署\n\n测试服务器放在上海机房，备份每天晚上运行。\n")
    await put(api, "th.md", "# ระบบ\n\nเซิร์ฟเวอร์หลักตั้งอยู่ที่ศูนย์ข้อมูลในกรุงเทพ\n")
    assert await found_paths(api, "测试服务器在哪个机房？", lexical_only=True) == {"zh.md"}
    assert await found_paths(api, "เซิร์ฟเวอร์หลักอยู่ที่ไหน", lexical_only=True) == {"th.md"}


async def test_the_floor_holds_when_the_lexical_lanes_match_nothing(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """In a bucket over floor_min_rows, a query no memory shares a word with gets only
    semantic hits; at a middling similarity (set here: every stored vector at cosine 0.6
    to the query's) they are below the floor and nothing returns (below_floor says so),
    where before the floor was off. A query sharing a rare word answers (the control)."""
    tenant, namespace = unique("t"), unique("ns")
    api = Api(channel, brain_server.mint_key(tenant, "alice"), namespace=namespace)
    rare = ""
    for i in range(50):  # floor_min_rows; and the semantic lane's 50 candidates hold all
        rare = unique("w").replace("-", "")
        await api.save(f"Deploy note {i}: the {rare} service restarted")
    dimension = brain_server.sql(
        """SELECT atttypmod AS d FROM pg_attribute
           WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"""
    )[0]["d"]
    query = [1.0] + [0.0] * (dimension - 1)
    stored = [0.6, 0.8] + [0.0] * (dimension - 2)  # cosine 0.6 to the query
    brain_server.sql(
        """UPDATE memories m SET embedding = $1::float4[]::vector
           FROM tenants t WHERE t.tenant_id = m.tenant_id AND t.name = $2""",
        stored, tenant,
    )  # fmt: skip
    relevance = 1 / (1 + math.exp(-(HYBRID_MODEL.bias + HYBRID_MODEL.weights[5] * 0.6)))
    assert relevance < HYBRID_MODEL.floor  # what the assertion below relies on
    request = memory_pb2.SearchMemoriesRequest(
        scope=api.scope(), query="zzqx unheard", limit=5, query_embedding=query
    )
    silent = await api.memories.SearchMemories(request, metadata=api.md)
    assert list(silent.hits) == [] and silent.below_floor == 5
    request.min_relevance = 0.0
    everything = await api.memories.SearchMemories(request, metadata=api.md)
    assert len(everything.hits) == 5
    assert all(h.semantic_rank and not h.lexical_rank for h in everything.hits)
    found = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(
            scope=api.scope(), query=f"the {rare} service?", limit=5, query_embedding=query
        ),
        metadata=api.md,
    )
    assert found.hits and found.hits[0].lexical_rank == 1 and found.below_floor == 0


async def test_a_tenant_configured_for_the_multilingual_embedder_stores_its_vectors(
    pg_cluster: PgCluster, loop_thread: LoopThread, brain_server: BrainServer
) -> None:
    """With --tenant-embedder A=multilingual, A's memories and chunks are embedded by the
    multilingual model while B (the server's default) keeps the local one; a backfill
    with --reembed moves B's vectors to the multilingual model. Which model made a vector
    is read from the rows, not from what the models think."""
    a, b = unique("ta"), unique("tb")
    a_key = brain_server.mint_key(a, "alice", permissions=KB)
    b_key = brain_server.mint_key(b, "bob", permissions=KB)

    def models(tenant: str, table: str) -> set[str | None]:
        rows = brain_server.sql(
            f"""SELECT DISTINCT m.embedding_model FROM {table} m JOIN tenants t USING (tenant_id)
                WHERE t.name = $1 AND m.retired_at IS NULL""",
            tenant,
        )
        return {r["embedding_model"] for r in rows}

    multilingual_model = "multilingual:multilingual-e5-small-q4"
    server = BrainServer(
        cluster=pg_cluster, loop=loop_thread,
        settings=server_settings(pg_cluster, tenant_embedders=f"{a}=multilingual"),
    )  # fmt: skip
    with session_filler_held(brain_server):  # only this server's filler fills A's chunks
        server.start()
        try:
            async with server.channel() as ch:
                alice, bob = Api(ch, a_key), Api(ch, b_key)
                await alice.save("会议改到下午三点")
                await bob.save("The meeting moved to 3 pm")
                await put(alice, "a.md", "# 部署\n\n测试服务器放在上海机房。\n")
                assert await alice.search("会议", mode=LEXICAL)  # the tenant is served
            # The filler embeds in the background: wait for it, as long as it takes.
            while models(a, "document_chunks") != {multilingual_model}:
                assert models(a, "document_chunks") <= {None, multilingual_model}
                await asyncio.sleep(0.2)
        finally:
            server.stop()
    assert models(a, "memories") == {multilingual_model}
    assert models(b, "memories") == {"local"}
    done = brain_server.admin(
        "embeddings", "backfill", "--tenant", b, "--embedder", "multilingual", "--reembed"
    )
    assert "backfilled 1 memories" in done.stdout, done.stdout
    assert models(b, "memories") == {multilingual_model}
    assert models(a, "memories") == {multilingual_model}  # untouched


def test_tenant_embedders_parse_and_name_a_bad_item() -> None:
    assert parse_tenant_embedders("acme=multilingual, globex=local,") == {
        "acme": "multilingual", "globex": "local"
    }  # fmt: skip
    assert parse_tenant_embedders(None) == {}
    for bad in ("acme", "=local", "acme="):
        with pytest.raises(ValueError, match="TENANT=EMBEDDER"):
            parse_tenant_embedders(bad)


def test_bm25_counts_at_least_prior_rows_and_coverage_at_least_one_rare_term() -> None:
    """In a bucket of three rows a term in all three is weighed as in a bucket of 50 (so
    it still counts as rare), the average length stays the real one; coverage divides by
    the query's IDF mass, or one rare term's weight when the mass is smaller."""
    params = RetrievalParams()
    plan = plan_lane("english", [("", 3.0, 12.0), ("alpha", 3.0, 0.0), ("zulu", 0.0, 0.0)], params)
    assert plan.n == params.prior_rows == 50 and plan.avgdl == 4.0
    alpha = math.log(1 + (50 - 3 + 0.5) / 3.5)
    assert dict(plan.weights) == {"alpha": pytest.approx(alpha)}
    assert plan.mass == pytest.approx(alpha + math.log(1 + 50.5 / 0.5))  # unseen: rarest
    assert plan_lane("english", [("", 0.0, 0.0), ("alpha", 0.0, 0.0)], params).n == 0
    rare = math.log1p(49.5 / 1.5)
    assert share(alpha, plan.mass, 50) == pytest.approx(alpha / plan.mass)
    assert share(0.1, 0.2, 50) == pytest.approx(0.1 / rare)  # common words only: little
    assert share(9.0, 3.0, 50) == 1.0
