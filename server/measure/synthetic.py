"""A synthetic, Zipf-distributed corpus filled straight through SQL, for the benchmarks."""

from __future__ import annotations

import random

import asyncpg

from brain.server.measure.evaluation import PrivateBrain

VOCABULARY = 20_000


def sentence(rng: random.Random, words: int) -> str:
    """Words drawn with Zipf-like frequencies: w17 is common, w19870 rare."""
    return " ".join(f"w{int(rng.paretovariate(1.1)) % VOCABULARY}" for _ in range(words))


async def fill(owner_dsn: str, tenant: str, rows: int, dimension: int, rng: random.Random) -> None:
    """Insert ``rows`` more active memories into the tenant's bucket ``bench``."""
    conn = await asyncpg.connect(owner_dsn)
    try:
        tenant_id = await conn.fetchval("SELECT tenant_id FROM tenants WHERE name = $1", tenant)
        batch = 2000
        for start in range(0, rows, batch):
            n = min(batch, rows - start)
            texts = [sentence(rng, rng.randint(8, 30)) for _ in range(n)]
            await conn.execute(
                """INSERT INTO memories (tenant_id, memory_id, version, namespace, content,
                       labels, status, valid_from, created_by, changed_by, changed_by_key,
                       change, embedding, embedding_model)
                   SELECT $1, gen_random_uuid(), 1, 'bench', t, '{team}', 'active', now(),
                          'bench', 'bench', 'bench', 'save',
                          CASE WHEN $3 > 0 THEN
                              (SELECT array_agg(random() - 0.5 + i * 0)::vector
                               FROM generate_series(1, $3) i)
                          END,
                          CASE WHEN $3 > 0 THEN $4 END
                   FROM unnest($2::text[]) AS t""",
                tenant_id,
                texts,
                dimension,
                "bench",
            )
        await conn.execute("ANALYZE memories")
    finally:
        await conn.close()


async def tenant_of(brain: PrivateBrain, api_key: str) -> str:
    conn = await asyncpg.connect(brain.owner_dsn)
    try:
        name: str = await conn.fetchval(
            "SELECT t.name FROM api_keys k JOIN tenants t USING (tenant_id) WHERE k.key_id = $1",
            api_key.split("_")[1],
        )
        return name
    finally:
        await conn.close()
