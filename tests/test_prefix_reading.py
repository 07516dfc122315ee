# ruff: noqa: RUF001  (Cyrillic letters that look Latin: the texts are Russian)
"""Words of spaced scripts other than Latin are read by their first four characters in the
english vector (migration 0064, issue 34): another inflection of the word matches, for
memories and knowledge chunks alike, and the term statistics still count exactly what is
stored. Lexical behaviour is exact, so these tests assert it exactly.
"""

from __future__ import annotations

import grpc

from brain.v1 import memory_pb2

from .conftest import BrainServer, unique
from .helpers import Api
from .test_knowledge import found_paths, put
from .test_search_scale import term_counts

LEXICAL = memory_pb2.SEARCH_MODE_LEXICAL
KB = "memories:read,memories:write,memories:forget,knowledge:read,knowledge:write"


def lexemes(server: BrainServer, config: str, text: str) -> set[str]:
    rows = server.sql(
        "SELECT unnest(tsvector_to_array(brain_tsv($1::regconfig, $2))) AS l", config, text
    )
    return {r["l"] for r in rows}


def test_non_latin_words_are_read_by_four_letters_in_the_english_vector_only(
    brain_server: BrainServer,
) -> None:
    """Russian, Hindi and Arabic words over four letters become their first four (an Arabic
    word without its attached article or conjunction); the exact-form vector keeps them
    whole, and English, Spanish, numbers and short words are read as before."""
    assert lexemes(brain_server, "english", "Ирина оплачивает счета поставщиков") == {
        "ирин", "опла", "счет", "пост"
    }  # fmt: skip
    assert lexemes(brain_server, "simple", "Ирина оплачивает счета поставщиков") == {
        "ирина", "оплачивает", "счета", "поставщиков"
    }  # fmt: skip
    assert lexemes(brain_server, "english", "राहुल मानव संसाधन विभाग संभालते हैं") == {
        "राहु", "मानव", "संसा", "विभा", "संभा"
    }  # fmt: skip
    # ال (the) and وال (and the) come off before the four letters are taken.
    assert lexemes(brain_server, "english", "سارة مسؤولة عن الموارد والعقود") == {
        "سارة", "مسؤو", "موار", "عقود"
    }  # fmt: skip
    assert lexemes(brain_server, "english", "Deploys failed in the Tokyo region") == {
        "deploy", "fail", "tokyo", "region"
    }  # fmt: skip
    assert "semana" in lexemes(brain_server, "english", "La reunión de la semana")
    # Numbers and mixed tokens stay whole; a word of four letters is itself.
    assert lexemes(brain_server, "english", "сервер 2024 v15 код") == {
        "серв", "2024", "v15", "код"
    }  # fmt: skip


async def test_another_inflection_finds_the_memory_and_no_other(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A question using other inflections of a memory's words finds it lexically (before
    0064 it shared no lexeme with it); a look-alike about something else is not found, and
    its own words find it (the control)."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice"), namespace=unique("inf"))
    bills = (await api.save("Ирина оплачивает счета поставщиков каждую пятницу")).memory.id
    contracts = (await api.save("Олег готовит договоры с клиентами")).memory.id
    hr = (await api.save("राहुल मानव संसाधन विभाग संभालते हैं")).memory.id
    people = (await api.save("سارة مسؤولة عن الموارد البشرية")).memory.id
    for i in range(5):
        await api.save(f"Note {i} about the English release train")
    assert await api.search("Кто оплатил счёт поставщику?", mode=LEXICAL) == [bills]
    assert await api.search("एचआर विभाग कौन संभालता है?", mode=LEXICAL) == [hr]
    assert await api.search("من المسؤول عن موارد الشركة؟", mode=LEXICAL) == [people]
    assert await api.search("Кто готовит договоры?", mode=LEXICAL) == [contracts]


async def test_term_statistics_count_the_read_words_exactly(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Saves, updates and forgets keep the per-cell counts of the four-letter forms equal
    to a recount from the rows; two inflections of one word count as one term."""
    tenant = unique("t")
    api = Api(channel, brain_server.mint_key(
        tenant, "writer", permissions="memories:read,memories:write,memories:forget"
    ))  # fmt: skip
    first = (await api.save("Счета поставщиков оплачены")).memory.id
    await api.save("Поставщик прислал новый счёт")
    third = (await api.save("Поставщики ждут оплаты")).memory.id
    assert term_counts(brain_server, tenant)[("english", "пост", ("team",))] == (3, 0)
    await api.update(first, ["content"], content="Договор подписан")
    await api.forget(third)
    kept = term_counts(brain_server, tenant)
    assert kept[("english", "пост", ("team",))] == (1, 0)
    assert kept[("simple", "поставщик", ("team",))] == (1, 0)
    assert not [key for key in kept if key[1] in ("опла", "оплаты")]  # left with its memory
    brain_server.sql(
        "SELECT brain_rebuild_lexical_stats(tenant_id) FROM tenants WHERE name = $1", tenant
    )
    assert term_counts(brain_server, tenant) == kept


async def test_knowledge_chunks_are_read_the_same_way(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """A Russian document is found lexically by a question in other inflections; the
    Hindi one is not, and is found by its own words (the control)."""
    api = Api(channel, brain_server.mint_key(unique("t"), "alice", permissions=KB))
    await put(api, "ru.md", "# Оплата\n\nСчета поставщиков оплачиваются по пятницам.\n")
    await put(api, "hi.md", "# टीम\n\nराहुल मानव संसाधन विभाग संभालते हैं।\n")
    assert await found_paths(api, "Когда оплачивают счёт поставщика?", lexical_only=True) == {
        "ru.md"
    }
    assert await found_paths(api, "विभाग कौन संभालता है?", lexical_only=True) == {"hi.md"}


async def lexical_scores(api: Api, query: str) -> dict[str, float]:
    response = await api.memories.SearchMemories(
        memory_pb2.SearchMemoriesRequest(
            scope=api.scope(), query=query, limit=20, mode=LEXICAL, min_relevance=0.0
        ),
        metadata=api.md,
    )
    return {h.memory.id: h.lexical_score for h in response.hits}


async def test_another_users_inflections_change_no_score_a_caller_sees(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """Bob's private memories share the four-letter forms of Alice's words: Alice's scores
    stay what they were (no count of his rows reaches her), while a key that may read
    Bob's rows gets other scores for the same memories (the positive control)."""
    tenant, namespace = unique("t"), unique("ns")
    alice = Api(
        channel,
        brain_server.mint_key(tenant, "alice", user="alice", namespaces=(namespace,)),
        namespace=namespace,
        user_id="alice",
    )
    writer = Api(channel, brain_server.mint_key(tenant, "writer"), namespace=namespace)
    own = {(await alice.save(text)).memory.id for text in (
        "Ирина оплачивает счета поставщиков", "Поставщик прислал договор", "Отчёт готов"
    )}  # fmt: skip
    query = "Кто оплачивает счета поставщикам?"
    before = await lexical_scores(alice, query)
    assert set(before) <= own and before
    seen_before = await lexical_scores(writer, query)
    for i in range(6):
        await writer.save(f"Поставки и оплата счетов номер {i}", scope=writer.scope(user_id="bob"))
    assert await lexical_scores(alice, query) == before
    seen_after = await lexical_scores(writer, query)
    assert len(seen_after) > len(seen_before)
    assert any(seen_after[i] != score for i, score in seen_before.items())
