"""What migration 0064's backfill costs per 10,000 memories.

    .venv/bin/python -m brain.server.measure.lexical_backfill [--memories 10000]

For each of two corpora, a fresh private server (embedded PostgreSQL, embedder none) gets
``--memories`` memories in one bucket, filled through SQL as the benchmarks fill theirs:
*english* cycles the English memories of the multilingual sets, *multilingual* all their
memories (eleven languages; Russian, Hindi and Arabic among them, whose words 0064 reads by
four letters). Each text carries a number, so no two rows are equal. Then the part of the
migration that touches rows (regenerating the lexical columns of memories and knowledge
chunks, their indexes, and recounting every tenant's term statistics) runs as the
migration runs it, in one transaction, and is timed; and so is reading every row's text
through ``brain_tsv('english', ...)`` alone, the cost each write now pays, against the
function as migration 0050 defined it.

    .venv/bin/python -m brain.server.measure.lexical_backfill --unchanged FILE_OR_FOLDER...

counts instead the texts (every string of a JSON file) whose two lexical vectors differ
from what 0050's function made of them. Figures depend on
the machine and its load (the one printed with them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import asyncpg

from brain.server.measure import multilingual
from brain.server.measure.private import private_brain

MIGRATION = "0064_prefix_reading.sql"

FILL_SQL = """
    INSERT INTO memories (tenant_id, memory_id, version, namespace, content, labels, status,
                          valid_from, created_by, changed_by, changed_by_key, change)
    SELECT $1, gen_random_uuid(), 1, 'backfill',
           ($2::text[])[1 + g % cardinality($2::text[])] || ' ' || g,
           '{team}', 'active', now(), 'bench', 'bench', 'bench', 'save'
    FROM generate_series(1, $3::int) g"""


def corpus(which: str) -> list[str]:
    """The texts a corpus cycles through."""
    texts: list[str] = []
    for split in ("dev", "held-out"):  # the texts the figures were measured on
        for lang in multilingual.load(multilingual.SPLITS[split]):
            if which == "multilingual" or lang.code == "en":
                texts.extend(lang.memories)
    return texts


def migration(name: str) -> str:
    return resources.files("brain.server.storage").joinpath("migrations", name).read_text()


def before_0064() -> str:
    """``brain_tsv`` as migration 0050 defined it, renamed ``brain_tsv_before``."""
    text = migration("0050_multilingual_lexical.sql")
    start = text.index("CREATE FUNCTION brain_tsv(")
    end = text.index("$$;", text.index("AS $$", start)) + 3
    return text[start:end].replace("brain_tsv(", "brain_tsv_before(", 1)


def row_statements() -> str:
    """The statements of the migration that touch rows (after its functions)."""
    text = migration(MIGRATION)
    return text[text.index("-- Regenerate") :]


async def measure(which: str, memories: int) -> dict[str, float]:
    async with private_brain("none") as brain:
        bucket = await brain.bucket("backfill")
        conn = await asyncpg.connect(brain.owner_dsn)
        try:
            tenant_id = await conn.fetchval(
                "SELECT tenant_id FROM api_keys WHERE key_id = $1", bucket.api_key.split("_")[1]
            )
            await conn.execute("ALTER TABLE memories DISABLE TRIGGER memories_lexical_stats")
            await conn.execute(FILL_SQL, tenant_id, corpus(which), memories)
            await conn.execute("ALTER TABLE memories ENABLE TRIGGER memories_lexical_stats")
            await conn.execute("SELECT brain_rebuild_lexical_stats($1)", tenant_id)
            await conn.execute("VACUUM ANALYZE memories")
            started = time.perf_counter()
            async with conn.transaction():
                await conn.execute(row_statements())
            backfill = time.perf_counter() - started
            await conn.execute(before_0064())
            # Each read three times, alternating; the fastest counts (the load varies).
            times: dict[str, list[float]] = {"brain_tsv": [], "brain_tsv_before": []}
            for _ in range(3):
                for function, spent in times.items():
                    started = time.perf_counter()
                    await conn.fetchval(
                        f"SELECT sum(length({function}('english'::regconfig, content)))"
                        " FROM memories"
                    )
                    spent.append(time.perf_counter() - started)
            read, read_before = min(times["brain_tsv"]), min(times["brain_tsv_before"])
        finally:
            await conn.close()
    per = 10_000 / memories
    return {
        "backfill_s": backfill * per,
        "read_english_ms": read * 1000 / memories,
        "read_before_ms": read_before * 1000 / memories,
    }


def strings(path: Path) -> list[str]:
    """Every string of a JSON file (all its values, nested), or a text file's text; every
    file of a folder."""
    if path.is_dir():
        return [text for child in sorted(path.rglob("*")) if child.is_file()
                for text in strings(child)]  # fmt: skip
    if path.suffix != ".json":
        return [path.read_text(errors="replace")]
    found: list[str] = []
    todo: list[Any] = [json.loads(path.read_text())]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return found


async def unchanged(paths: Sequence[Path]) -> tuple[int, int]:
    """(texts, texts whose english or simple vector differs from before 0064)."""
    texts = [text for path in paths for text in strings(path)]
    async with private_brain("none") as brain:
        conn = await asyncpg.connect(brain.owner_dsn)
        try:
            await conn.execute(before_0064())
            differ: int = await conn.fetchval(
                """SELECT count(*) FROM unnest($1::text[]) t WHERE
                       brain_tsv('english', t) IS DISTINCT FROM brain_tsv_before('english', t)
                    OR brain_tsv('simple', t) IS DISTINCT FROM brain_tsv_before('simple', t)""",
                texts,
            )
        finally:
            await conn.close()
    return len(texts), differ


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--memories", type=int, default=10_000)
    p.add_argument(
        "--unchanged",
        type=Path,
        nargs="+",
        help="instead: count the texts of these files (JSON: every string) or folders whose "
        "lexical vectors differ from before 0064",
    )
    args = p.parse_args(argv)
    if args.unchanged:
        texts, differ = asyncio.run(unchanged(args.unchanged))
        print(f"{texts} texts, {differ} read differently than before 0064")
        return
    for which in ("english", "multilingual"):
        figures = asyncio.run(measure(which, args.memories))
        print(
            f"{which}: {args.memories} memories; backfill {figures['backfill_s']:.1f} s per "
            f"10,000 memories; brain_tsv('english') {figures['read_english_ms']:.3f} ms per "
            f"memory ({figures['read_before_ms']:.3f} ms before 0064; load "
            f"{os.getloadavg()[0]:.1f})"
        )


if __name__ == "__main__":
    main()
