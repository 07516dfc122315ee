"""Migration 0066 lets `brain_function_lexemes` answer "none" without parsing a text that
holds no voter (a common function word of another Latin-script language) and no Cyrillic,
Arabic or Devanagari letter. It must change no vector: stored columns were not
regenerated, and a query must read text as the rows it searches were read. So the lexical
functions as they are are compared, text by text, with their previous definitions
(migrations 0050 and 0064, installed in a scratch schema inside a transaction that is rolled
back) on the multilingual sets, the knowledge sets, generated code and Markdown, and the
edge cases of the parser that a regular expression could read otherwise.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import asyncpg

from brain.server.measure.corpus_tree import build_tree

from .conftest import PgCluster

ROOT = Path(__file__).resolve().parents[1]
MIGRATIONS = ROOT / "server" / "storage" / "migrations"
DATA = ROOT / "server" / "measure" / "data"


def previous_definitions() -> list[str]:
    """`brain_function_lexemes` of 0050 and `brain_tsv` of 0064, renamed into schema ref."""
    first = (MIGRATIONS / "0050_multilingual_lexical.sql").read_text()
    lexemes = re.search(r"CREATE FUNCTION brain_function_lexemes\(.*?\n\$\$;", first, re.DOTALL)
    tsv = re.search(
        r"CREATE OR REPLACE FUNCTION brain_tsv\(.*?\n\$\$;",
        (MIGRATIONS / "0064_prefix_reading.sql").read_text(),
        re.DOTALL,
    )
    assert lexemes is not None and tsv is not None
    return [
        lexemes.group(0).replace(
            "CREATE FUNCTION brain_function_lexemes", "CREATE FUNCTION ref.brain_function_lexemes"
        ),
        tsv.group(0)
        .replace("CREATE OR REPLACE FUNCTION brain_tsv", "CREATE FUNCTION ref.brain_tsv")
        .replace("brain_function_lexemes(v_segmented)", "ref.brain_function_lexemes(v_segmented)"),
    ]


def voters() -> list[str]:
    found = re.search(
        r"v_voters constant text\[\] := ARRAY\[(.*?)\];",
        (MIGRATIONS / "0066_lexical_shortcut.sql").read_text(),
        re.DOTALL,
    )
    assert found is not None
    return re.findall(r"'([^']+)'", found.group(1))


def edge_cases() -> list[str]:
    """Every voter where a tokenizer and a regular expression might disagree."""
    texts = ["", "   ", "!!! ??? ...", "1234 5678", "the cat sat on the mat"]
    shapes = [
        "{w}", "{W}", "{C} end", "start {w}", "a {w} b", "x-{w}", "{w}-y", "x-{w}-y",
        "x_{w}", "{w}_y", "l'{w}", "{w}'s", "3{w}", "{w}3", "{w}.", "({w})", "[{w}]",
        "http://{w}.example.com/{w}", "mail {w}@example.com", "/usr/{w}/lib",
        "é{w}", "{w}é", "ж{w}", "{w}ж", "café {w} crème", "“{w}”", "—{w}—", "{w}\t{w}\n{w}",
        "zz{w}zz", "{w}{w}",
    ]  # fmt: skip
    for word in voters():
        for shape in shapes:
            texts.append(shape.format(w=word, W=word.upper(), C=word.capitalize()))
    texts += [
        "Der Server und die Datenbank laufen in Frankfurt.",
        "La réunion de l'équipe est à 10 heures.",
        "El pedido de los clientes llega el lunes.",
        "O relatório não está pronto em Lisboa.",
        "Ирина оплачивает счета поставщиков",
        "राहुल मानव संसाधन विभाग संभालते हैं",
        "سارة مسؤولة عن الموارد والعقود",
        "会议在东京举行。新しいノートパソコンを注文しました。회의는 내일입니다.",
        "ร้านอาหารพนักงานเปิดกี่โมง",
        "Ω ohm and µ micro and İstanbul and ǅemal",
        "def deploy(la, de_facto): return die(code)",
    ]
    return texts


def dataset_texts(tmp: Path) -> list[str]:
    texts: list[str] = []
    for name in ("multilingual.json", "multilingual_heldout.json", "multilingual_validation.json"):
        for language in json.loads((DATA / name).read_text())["languages"].values():
            for value in language.values():
                if isinstance(value, list):
                    texts += [v if isinstance(v, str) else json.dumps(v) for v in value]
    for folder in ("knowledge_set", "knowledge_validation"):
        for path in sorted((ROOT / "tests" / "data" / folder / "docs").rglob("*.md")):
            texts += [p for p in path.read_text().split("\n\n") if p.strip()]
    tree = build_tree(tmp / "tree", 150_000)
    for path in sorted(tree.root.rglob("*")):
        if path.is_file():
            texts += [p for p in path.read_text().split("\n\n") if p.strip()]
    return texts


async def test_vectors_are_those_of_the_previous_definitions(
    pg_cluster: PgCluster, tmp_path: Path
) -> None:
    texts = edge_cases() + dataset_texts(tmp_path)
    conn = await asyncpg.connect(pg_cluster.owner_dsn)
    try:
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.execute("CREATE SCHEMA ref")
            for definition in previous_definitions():
                await conn.execute(definition)
            rows = await conn.fetch(
                """SELECT t,
                          brain_function_lexemes(brain_segment(t)) AS now_stops,
                          ref.brain_function_lexemes(brain_segment(t)) AS then_stops,
                          brain_tsv('english', t)::text AS now_english,
                          ref.brain_tsv('english', t)::text AS then_english,
                          brain_tsv('simple', t)::text AS now_simple,
                          ref.brain_tsv('simple', t)::text AS then_simple
                   FROM unnest($1::text[]) AS t""",
                texts,
            )
        finally:
            await tx.rollback()
    finally:
        await conn.close()
    differ = [
        r["t"] for r in rows
        if (r["now_stops"], r["now_english"], r["now_simple"])
        != (r["then_stops"], r["then_english"], r["then_simple"])
    ]  # fmt: skip
    assert differ == []
    # The comparison covers both paths: texts with function words to remove (every
    # language of the sets, and voters as words) and texts the shortcut answers.
    removing = [r["t"] for r in rows if r["then_stops"]]
    assert len(removing) > 200
    assert "Der Server und die Datenbank laufen in Frankfurt." in removing
    assert "x_la" in removing and "La réunion de l'équipe est à 10 heures." in removing
    assert len(rows) - len(removing) > 1000
