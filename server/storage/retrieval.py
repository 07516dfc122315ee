"""The SQL of the retrieval lanes: BM25 over a tsvector, the lexical lanes' term
statistics and candidates, nearest neighbours over the HNSW index, and the counts they
need. Queries are read by the same pipeline as stored text, ``brain_tsv`` (migration
0050: unspaced scripts as character bigrams, each language's function words removed).
The domain (``domain/retrieval/lanes.py``) decides what to read and how to rank it;
every statement here puts the caller's visibility, status and time predicates inside it,
before its LIMIT, so a crowded bucket cannot starve a lane.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from brain.server.storage import setlocal
from brain.server.storage.memories import (
    RowFilter,
    TimeCoords,
    filter_predicate,
    ranking_columns,
    ranking_of,
    time_predicate,
)
from brain.server.storage.visibility import (
    Params,
    Visibility,
    cell_predicate,
    visibility_predicate,
)


# The exact-form (`simple`) lane reads content words only: a lexeme the english
# configuration drops as a stop word ("with", "the", "my") draws and scores nothing there,
# so no hit rests on a function word alone, whatever the bucket's size (the `english` lane
# never holds them).
def content_word(lexeme: str) -> str:
    return f"length(to_tsvector('english'::regconfig, {lexeme})) > 0"


@dataclass(frozen=True)
class Bm25:
    """BM25's constants and the lexical read budgets (from ``RetrievalParams``)."""

    k1: float
    b: float
    cap: int  # the candidate budget: rows a lane's drawn terms may hold
    candidates: int  # rows each lane contributes to fusion


# Text search configuration -> the generated tsvector column that holds it.
TSVECTORS = {"english": "search_tsv", "simple": "search_tsv_simple"}


@dataclass(frozen=True)
class Corpus:
    """What the lanes search: a table (aliased ``m`` in every statement) whose rows carry
    ``search_tsv``, ``search_tsv_simple``, ``embedding`` and ``embedding_model``, the
    columns that identify a row within its tenant, the columns a hit shows, and the
    column whose equal values group hits (a memory's session, a chunk's document)."""

    table: str
    keys: tuple[tuple[str, str], ...]  # (column, SQL type)
    columns: Callable[[Visibility, Params], str]
    session: str = "valid_from"
    # Columns ordering rows of equal score before the keys do: values that stay the same
    # when the same content is put again (a chunk's collection, path and number), so equal
    # scores rank the same way in every run rather than by random ids (issue 31).
    ties: tuple[str, ...] = ()

    def key(self, row: asyncpg.Record) -> tuple[Any, ...]:
        return tuple(row[name] for name, _ in self.keys)

    def tie(self, row: asyncpg.Record) -> tuple[Any, ...]:
        """How ``row`` ranks among rows of equal score: its `ties`, then its keys."""
        return (*(row[name] for name in self.ties), *(str(k) for k in self.key(row)))

    def order(self, alias: str) -> str:
        """The SQL ordering rows of equal score, as `tie` does, over ``alias``."""
        return ", ".join(f"{alias}.{name}" for name in (*self.ties, *(k for k, _ in self.keys)))


# Memory lanes read the ranking columns; `shown` reads the returned hits in full.
MEMORIES = Corpus("memories", (("memory_id", "uuid"), ("version", "int")), ranking_columns)
# A lane's filter over ``m``: visibility, status, time and the caller's narrowing filters.
Where = Callable[[Params], str]


def memory_where(v: Visibility, f: RowFilter, t: TimeCoords) -> Where:
    """The predicate every memory lane puts inside its statement, before its LIMIT."""
    return lambda p: (
        f"{visibility_predicate(v, p)} AND {time_predicate(t, p)} AND {filter_predicate(f, p)}"
    )


async def bm25_rows(
    conn: asyncpg.Connection,
    corpus: Corpus,
    v: Visibility,
    where: Where,
    query: str,
    limit: int,
    bm25: Bm25,
    config: str = "english",
    corpus_size: int | None = None,
) -> list[asyncpg.Record]:
    """BM25 over the rows of ``corpus`` that pass ``where``, best first (``score``);
    terms OR-ed, weighted by IDF over those rows."""
    if config not in TSVECTORS:
        raise ValueError(f"no tsvector column for text search configuration {config!r}")
    tsv, cfg = TSVECTORS[config], f"'{config}'::regconfig"
    table = corpus.table
    keys = ", ".join(name for name, _ in corpus.keys)
    m_keys = ", ".join(f"m.{name}" for name, _ in corpus.keys)
    d_keys = ", ".join(f"d.{name}" for name, _ in corpus.keys)
    tf_keys = ", ".join(f"tf.{name}" for name, _ in corpus.keys)
    m_ties, d_ties, tf_ties = (
        "".join(f", {alias}.{name}" for name in corpus.ties) for alias in ("m", "d", "tf")
    )
    p = Params(query)
    scope_sql = where(p)
    k1, b = f"{p.add(bm25.k1)}::float8", f"{p.add(bm25.b)}::float8"
    if corpus_size is not None and not bm25.b:
        # Counted once per search for both lexical lanes; with b = 0 length drops out.
        corpus_sql = f"SELECT {p.add(float(corpus_size))}::float8 AS n, 1::float8 AS avgdl"
    else:
        avgdl = f"COALESCE(avg(length(m.{tsv})), 1)" if bm25.b else "1"
        corpus_sql = (
            f"SELECT count(*)::float8 AS n, {avgdl}::float8 AS avgdl "
            f"FROM {table} m WHERE {scope_sql}"
        )
    cap = p.add(bm25.cap)
    sql = f"""
        WITH terms AS (
            SELECT DISTINCT lexeme, quote_literal(lexeme)::tsquery AS tq
            FROM unnest(tsvector_to_array(brain_tsv({cfg}, $1))) AS lexeme
            {"WHERE " + content_word("lexeme") if config == "simple" else ""}
        ),
        -- Document frequency per term, counted up to the cap: a term in more rows than
        -- that is common, weighs little, and is not worth reading every row it is in.
        df AS (
            SELECT t.lexeme, t.tq,
                   (SELECT count(*) FROM (
                        SELECT 1 FROM {table} m WHERE m.{tsv} @@ t.tq AND {scope_sql}
                        LIMIT {cap}) hits)::float8 AS df
            FROM terms t
        ),
        q AS (
            SELECT string_agg(quote_literal(lexeme), ' | ')
                       FILTER (WHERE df < {cap})::tsquery AS rare,
                   string_agg(quote_literal(lexeme), ' | ')::tsquery AS every
            FROM df
        ),
        -- Candidates: rows holding a rare term; if every term is common (an unspecific
        -- query), the first rows found holding any of them, up to the cap. Read once
        -- (MATERIALIZED): inlined, the planner read them again for every query term
        -- (472 ms against 98 ms for an 8-term question over 31,943 chunks).
        docs AS MATERIALIZED (
            SELECT m.tenant_id, {m_keys}{m_ties}, m.{tsv} AS tsv, length(m.{tsv}) AS dl
            FROM {table} m, q
            WHERE q.rare IS NOT NULL AND m.{tsv} @@ q.rare AND {scope_sql}
            UNION ALL
            (SELECT m.tenant_id, {m_keys}{m_ties}, m.{tsv} AS tsv, length(m.{tsv}) AS dl
             FROM {table} m, q
             WHERE q.rare IS NULL AND q.every IS NOT NULL AND m.{tsv} @@ q.every
               AND {scope_sql}
             LIMIT {cap})
        ),
        corpus AS ({corpus_sql}),
        tf AS (
            SELECT d.tenant_id, {d_keys}{d_ties}, d.dl, u.lexeme,
                   cardinality(u.positions)::float8 AS tf
            FROM docs d, unnest(d.tsv) AS u
            WHERE u.lexeme IN (SELECT lexeme FROM terms)
        ),
        -- Rounded to 9 decimals: summed in another order, equal scores differ in their
        -- last bits, which would decide their order (and which of them make the limit).
        scored AS (
            SELECT tf.tenant_id, {tf_keys}{tf_ties},
                   round(sum(ln(1 + (c.n - df.df + 0.5) / (df.df + 0.5))
                       * tf.tf * ({k1} + 1)
                       / (tf.tf + {k1} * (1 - {b} + {b} * tf.dl / GREATEST(c.avgdl, 1))))
                       ::numeric, 9)::float8 AS score
            FROM tf JOIN df USING (lexeme), corpus c
            GROUP BY tf.tenant_id, {tf_keys}{tf_ties}
            ORDER BY score DESC, {corpus.order("tf")}
            LIMIT {p.add(limit)}
        )
        SELECT {corpus.columns(v, p)}, s.score,
               (SELECT sum(ln(1 + (c.n - df.df + 0.5) / (df.df + 0.5))) FROM df, corpus c) AS mass,
               (SELECT c.n FROM corpus c) AS n
        FROM scored s JOIN {table} m USING (tenant_id, {keys})
        ORDER BY s.score DESC, {corpus.order("m")}"""
    return list(await conn.fetch(sql, *p.values))


async def term_statistics(
    conn: asyncpg.Connection,
    v: Visibility,
    query: str,
    configs: Sequence[str] = ("english", "simple"),
) -> list[asyncpg.Record]:
    """(config, lexeme, df, len) of each query term, summed over the visibility cells
    ``v`` may see (migration 0010); lexeme '' is the cells' row count and total length.
    ``configs``: the text search configurations to read (both lanes' by default)."""
    p = Params(query)
    tenant = f"{p.add(v.tenant_id)}::uuid"
    branches = []
    for config in configs:
        if config not in TSVECTORS:
            raise ValueError(f"no tsvector column for text search configuration {config!r}")
        words = f"WHERE {content_word('l')}" if config == "simple" else ""
        branches += [
            f"SELECT '{config}'::text AS config, l AS lexeme FROM unnest(tsvector_to_array("
            f"brain_tsv('{config}'::regconfig, $1))) l {words}",
            f"SELECT '{config}', ''",
        ]
    rows = await conn.fetch(
        f"""
        WITH cells AS (
            SELECT c.cell_id FROM lexical_cells c
            WHERE c.tenant_id = {tenant} AND {cell_predicate(v, p, "c")}
        ),
        terms AS ({" UNION ALL ".join(branches)})
        -- Lexeme '' is each cell's row count and total length (see migration 0010).
        SELECT t.config, t.lexeme, s.df, s.len FROM terms t, LATERAL (
            SELECT COALESCE(sum(s.df), 0)::float8 AS df,
                   COALESCE(sum(s.total_length), 0)::float8 AS len
            FROM lexical_terms s
            WHERE s.tenant_id = {tenant} AND s.config = t.config AND s.lexeme = t.lexeme
              AND s.cell_id = ANY(ARRAY(SELECT cell_id FROM cells))) s""",
        *p.values,
    )
    return list(rows)


@dataclass(frozen=True)
class LanePlan:
    """What one BM25 lane reads: ``draw`` (a tsquery over the terms candidates come
    from), whether the query is unspecific (``common``), and every term's weight. When
    the rarest term alone is over the budget, ``pair`` (its rows that also hold the next
    rarest term, the best-scoring ones) is read first, then a few more of its rows."""

    config: str
    n: float
    avgdl: float
    draw: str
    common: bool
    weights: tuple[tuple[str, float], ...]
    over_budget: bool = False
    pair: str = ""
    mass: float = 0.0  # the IDF of every query term, matched or not (see relevance: coverage)


async def candidate_rows(
    conn: asyncpg.Connection,
    v: Visibility,
    plans: Sequence[LanePlan],
    f: RowFilter,
    t: TimeCoords,
    limit: int,
    bm25: Bm25,
) -> tuple[list[asyncpg.Record], list[LanePlan]]:
    """The planned lanes' best ``limit`` hits each (rows with ``lane`` and ``score``), and
    the unspecific lanes the shared read crowded out (to be read alone)."""
    p = Params()
    scope_sql = (
        f"{visibility_predicate(v, p)} AND {time_predicate(t, p)} AND {filter_predicate(f, p)}"
    )
    k1, b = f"{p.add(bm25.k1)}::float8", f"{p.add(bm25.b)}::float8"
    draws = {plan.config: f"{p.add(plan.draw)}::tsquery" for plan in plans}
    # Both lanes mostly match the same rows: when they draw alike, the rows are read once.
    drawn = ""
    either = " OR ".join(f"m.{TSVECTORS[c]} @@ {tq}" for c, tq in draws.items())
    columns = ", ".join(f"m.{TSVECTORS[c]}" for c in draws)
    crowding = shared = ""
    if all(plan.common for plan in plans):
        # Not through the GIN index (its posting lists are most of the bucket): the newest
        # rows holding a lane's rarest term. IS TRUE keeps the match out of the index yet,
        # leakproof, tested before the policies.
        shared = f"""({either}) IS TRUE AND {scope_sql}
            ORDER BY m.memory_id DESC LIMIT {p.add(bm25.candidates * 4)}"""
        crowding = ", (SELECT count(*) FROM drawn) AS drawn_rows" + "".join(
            f", (SELECT count(*) FROM drawn n WHERE n.{TSVECTORS[c]} @@ {tq}) AS rows_{c}"
            for c, tq in draws.items()
        )
    elif len(plans) > 1 and not any(plan.over_budget for plan in plans):
        # Each lane's terms fit the budget, so the limit (the budget per lane) cuts nothing:
        # every lane gets exactly the rows it would read alone.
        shared = f"({either}) AND {scope_sql} LIMIT {p.add(bm25.cap * len(plans))}"
    if shared:
        drawn = f"""drawn AS MATERIALIZED (
            SELECT {ranking_of("m")}, {columns}
            FROM memories m WHERE {shared}),"""
    lanes_sql = []
    for plan in plans:
        tsv, tq = TSVECTORS[plan.config], draws[plan.config]
        if drawn:
            read = f"""SELECT {ranking_of("n")}, n.{tsv} AS tsv
                       FROM drawn n WHERE n.{tsv} @@ {tq}"""
        elif plan.common:
            read = f"""SELECT {ranking_of("m")}, m.{tsv} AS tsv
                       FROM memories m WHERE (m.{tsv} @@ {tq}) IS TRUE AND {scope_sql}
                       ORDER BY m.memory_id DESC LIMIT {p.add(bm25.candidates * 4)}"""
        elif plan.over_budget:
            # The rarest term alone has more rows than the budget: its rows holding the
            # next rarest term too first (they score highest), then a few more of its rows,
            # read only while those are fewer than 4 x candidates. Those few are the first
            # of a long posting list, built whole to take them (most of such a search at
            # 1,000,000 memories); so a row holding the rarest term several times but not
            # the next rarest is not read once the pair fills the candidates.
            budget = p.add(bm25.candidates * 4)
            rest = f"""SELECT {ranking_of("m")}, m.{tsv} AS tsv, 1 AS pass
                       FROM memories m WHERE m.{tsv} @@ {tq} AND {scope_sql}"""
            read = f"""SELECT {ranking_of("c")}, c.tsv
                       FROM ({rest} LIMIT {budget}) c"""
            if plan.pair:
                read = f"""WITH pair AS MATERIALIZED (
                               SELECT {ranking_of("m")}, m.{tsv} AS tsv, 0 AS pass
                               FROM memories m
                               WHERE m.{tsv} @@ {p.add(plan.pair)}::tsquery AND {scope_sql}
                               LIMIT {budget})
                           SELECT DISTINCT ON (c.memory_id)
                                  {ranking_of("c")}, c.tsv
                           FROM (SELECT * FROM pair UNION ALL
                                 ({rest} AND (SELECT count(*) FROM pair) < {budget}
                                  LIMIT {budget})) c
                           ORDER BY c.memory_id, c.pass"""
        else:
            read = f"""SELECT {ranking_of("m")}, m.{tsv} AS tsv
                       FROM memories m WHERE m.{tsv} @@ {tq} AND {scope_sql}
                       LIMIT {p.add(bm25.cap)}"""
        terms = p.add([term for term, _ in plan.weights])
        idfs = p.add([idf for _, idf in plan.weights])
        norm = f"{k1} * (1 - {b} + {b} * length(d.tsv) / {p.add(max(plan.avgdl, 1.0))}::float8)"
        # Each candidate scored on its own, its query words looked up in the term arrays.
        # Only the query's lexemes are unnested: marked with weight A (the generated
        # vectors carry none), then kept by ts_filter, without a row per other word.
        lanes_sql.append(f"""
            SELECT '{plan.config}'::text AS lane, {ranking_of("d")}, (
                SELECT sum(({idfs}::float8[])[array_position({terms}::text[], u.lexeme)]
                           * cardinality(u.positions) * ({k1} + 1)
                           / (cardinality(u.positions) + {norm}))
                FROM unnest(ts_filter(setweight(d.tsv, 'A', {terms}::text[]), '{{a}}')) AS u
            ) AS score
            FROM ({read}) d""")
    # The ranking columns come along with each candidate: no second look-up of the hits.
    sql = f"""
        WITH {drawn} scored AS MATERIALIZED ({" UNION ALL ".join(lanes_sql)}),
        ranked AS (
            SELECT s.*, row_number() OVER (PARTITION BY s.lane
                                           ORDER BY s.score DESC, s.memory_id) AS rank
            FROM scored s WHERE s.score IS NOT NULL
        )
        SELECT {ranking_of("r")}, r.lane, r.score{crowding}
        FROM ranked r
        WHERE r.rank <= {p.add(limit)}
        ORDER BY r.lane, r.score DESC, r.memory_id"""
    rows = await conn.fetch(sql, *p.values)
    # An unspecific lane keeps the shared newest rows only if it holds every one of them,
    # or they were fewer than the limit; else the other lane's rows were newer and crowded
    # its own out. (Every shared row holds some lane's term, so a full read has hits.)
    crowded = [
        plan
        for plan in plans
        if crowding and rows
        and rows[0]["drawn_rows"] >= bm25.candidates * 4
        and rows[0][f"rows_{plan.config}"] < bm25.candidates * 4
    ]  # fmt: skip
    return list(rows), crowded


async def rows_in(conn: asyncpg.Connection, corpus: Corpus, where: Where) -> int:
    """How many rows of ``corpus`` pass ``where``."""
    p = Params()
    value: int = await conn.fetchval(
        f"SELECT count(*) FROM {corpus.table} m WHERE {where(p)}", *p.values
    )
    return value


async def nearest_rows(
    conn: asyncpg.Connection,
    corpus: Corpus,
    v: Visibility,
    where: Where,
    vector: Sequence[float],
    limit: int,
    *,
    ef_search: int,
    similarity_floor: float,
    model: str | None = None,
    query: Sequence[float] | None = None,
) -> list[asyncpg.Record]:
    """Nearest neighbours by cosine (``similarity``), filtered in the scan; rows below
    ``similarity_floor`` are dropped. With ``query`` (the query's own vector, when
    ``vector`` was moved toward the lexical hits), each row also carries its cosine to it
    (``query_similarity``)."""
    # Iterative scans keep walking the HNSW graph until `limit` rows pass the filters.
    await setlocal.set_local(
        conn,
        {"hnsw.iterative_scan": "relaxed_order", "hnsw.ef_search": str(max(ef_search, limit))},
    )
    p = Params(list(vector))
    same_model = f"AND m.embedding_model = {p.add(model)}" if model else ""
    own = (
        f"1 - (m.embedding <=> {p.add(list(query))}::vector)"
        if query is not None
        else "1 - (m.embedding <=> $1::vector)"
    )
    sql = f"""
        SELECT * FROM (
            SELECT {corpus.columns(v, p)}, 1 - (m.embedding <=> $1::vector) AS similarity,
                {own} AS query_similarity
            FROM {corpus.table} m
            WHERE m.embedding IS NOT NULL {same_model} AND {where(p)}
            ORDER BY m.embedding <=> $1::vector
            LIMIT {p.add(limit)}
        ) hits
        WHERE similarity >= {p.add(similarity_floor)}::float8
        ORDER BY similarity DESC, {corpus.order("hits")}"""
    return list(await conn.fetch(sql, *p.values))


async def embeddings_of(
    conn: asyncpg.Connection,
    v: Visibility,
    top: Sequence[asyncpg.Record],
    model: str | None,
    corpus: Corpus = MEMORIES,
    where: Where | None = None,
) -> list[asyncpg.Record]:
    """The embeddings of the rows ``top`` that the caller may still see (``where``, or
    its visibility), of ``model`` when given."""
    p = Params([r["tenant_id"] for r in top])
    arrays = ", ".join(f"{p.add([r[name] for r in top])}::{kind}[]" for name, kind in corpus.keys)
    columns = ", ".join(f"m.{name}" for name, _ in corpus.keys)
    same_model = f"AND m.embedding_model = {p.add(model)}" if model else ""
    allowed = where(p) if where is not None else visibility_predicate(v, p)
    rows = await conn.fetch(
        f"""SELECT m.embedding FROM {corpus.table} m
            WHERE (m.tenant_id, {columns}) IN (SELECT * FROM unnest($1::uuid[], {arrays}))
              AND m.embedding IS NOT NULL {same_model} AND {allowed}""",
        *p.values,
    )
    return list(rows)
