-- BM25 term statistics kept at write time, per visibility cell, so a search reads its
-- query terms' document frequencies and the corpus size with a few index lookups instead
-- of counting rows (see storage/lexical.py and README, Scaling with bucket size).
--
-- A cell is a set of rows every caller sees all or nothing of: one tenant, namespace,
-- user, session and label set, over current active versions (proposals, which depend on
-- who asks, are never counted). A search sums the cells it may see, so no statistic
-- crosses a wall. Each cell's counts are split over 16 shards by memory id, so concurrent
-- writers in one cell rarely wait on the same counter row; a memory always lands in the
-- same shard, and a count that falls to zero is deleted, so a forgotten word leaves no row.

CREATE TABLE lexical_cells (
    tenant_id  uuid NOT NULL REFERENCES tenants (tenant_id),
    cell_id    bigint GENERATED ALWAYS AS IDENTITY,
    namespace  text NOT NULL,
    user_id    text NOT NULL,
    session_id text NOT NULL,
    labels     text[] NOT NULL,  -- sorted, distinct
    PRIMARY KEY (tenant_id, cell_id),
    UNIQUE (tenant_id, namespace, user_id, session_id, labels)
);

-- config 'english' or 'simple' (the tsvector); lexeme '' is the cell's row: df = rows,
-- total_length = the sum of their tsvector lengths.
CREATE TABLE lexical_terms (
    tenant_id    uuid NOT NULL,
    config       text NOT NULL,
    lexeme       text NOT NULL,
    cell_id      bigint NOT NULL,
    shard        smallint NOT NULL,
    df           bigint NOT NULL,
    total_length bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, config, lexeme, cell_id, shard),
    FOREIGN KEY (tenant_id, cell_id) REFERENCES lexical_cells (tenant_id, cell_id)
);

SELECT brain_protect_table(
    'lexical_cells',
    'tenant_id = brain_current_tenant() '
    'AND brain_key_may_see(labels, namespace, user_id, session_id)');
-- A term row is visible exactly when its cell is (the subquery is itself under RLS).
SELECT brain_protect_table(
    'lexical_terms',
    'tenant_id = brain_current_tenant() AND EXISTS (SELECT 1 FROM lexical_cells c '
    'WHERE c.tenant_id = lexical_terms.tenant_id AND c.cell_id = lexical_terms.cell_id)');
GRANT SELECT ON lexical_cells, lexical_terms TO brain_app;

-- Add (p_sign = 1) or remove (-1) one row's contribution. Definer: the statistics are the
-- database's bookkeeping, written whatever the writer may read.
CREATE FUNCTION brain_lexical_count(
    p_tenant uuid, p_memory_id uuid, p_namespace text, p_user_id text, p_session_id text,
    p_labels text[], p_english tsvector, p_simple tsvector, p_sign int
) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_labels text[] := ARRAY(SELECT DISTINCT l FROM unnest(p_labels) l ORDER BY l);
    v_cell bigint;
    v_shard smallint := abs(hashtext(p_memory_id::text)) % 16;
    v_english text[] := tsvector_to_array(p_english);
    v_simple text[] := tsvector_to_array(p_simple);
BEGIN
    SELECT c.cell_id INTO v_cell FROM lexical_cells c
    WHERE c.tenant_id = p_tenant AND c.namespace = p_namespace AND c.user_id = p_user_id
      AND c.session_id = p_session_id AND c.labels = v_labels;
    IF v_cell IS NULL THEN
        INSERT INTO lexical_cells (tenant_id, namespace, user_id, session_id, labels)
        VALUES (p_tenant, p_namespace, p_user_id, p_session_id, v_labels)
        ON CONFLICT DO NOTHING RETURNING cell_id INTO v_cell;
        IF v_cell IS NULL THEN  -- a concurrent writer created it
            SELECT c.cell_id INTO v_cell FROM lexical_cells c
            WHERE c.tenant_id = p_tenant AND c.namespace = p_namespace
              AND c.user_id = p_user_id AND c.session_id = p_session_id
              AND c.labels = v_labels;
        END IF;
    END IF;
    -- Rows in key order, so concurrent writers lock counters in the same order.
    INSERT INTO lexical_terms AS t (tenant_id, config, lexeme, cell_id, shard, df, total_length)
    SELECT p_tenant, d.config, d.lexeme, v_cell, v_shard, p_sign, d.len
    FROM (SELECT 'english' AS config, l AS lexeme, 0 AS len FROM unnest(v_english) l
          UNION ALL SELECT 'simple', l, 0 FROM unnest(v_simple) l
          UNION ALL SELECT 'english', '', p_sign * length(p_english)
          UNION ALL SELECT 'simple', '', p_sign * length(p_simple)) d
    ORDER BY d.config, d.lexeme
    ON CONFLICT (tenant_id, config, lexeme, cell_id, shard) DO UPDATE
        SET df = t.df + excluded.df, total_length = t.total_length + excluded.total_length;
    IF p_sign < 0 THEN
        DELETE FROM lexical_terms t
        WHERE t.tenant_id = p_tenant AND t.cell_id = v_cell AND t.shard = v_shard
          AND t.df <= 0
          AND ((t.config = 'english' AND t.lexeme = ANY(v_english || ''::text))
               OR (t.config = 'simple' AND t.lexeme = ANY(v_simple || ''::text)));
    END IF;
END
$$;
REVOKE ALL ON FUNCTION brain_lexical_count(
    uuid, uuid, text, text, text, text[], tsvector, tsvector, int) FROM PUBLIC;

-- Every change of a memory row: what it counted for before leaves, what it counts for
-- now enters (a forget blanks the content, so its words leave with it).
CREATE FUNCTION brain_lexical_stats() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_old boolean := TG_OP <> 'INSERT' AND OLD.retired_at IS NULL AND OLD.status = 'active';
    v_new boolean := TG_OP <> 'DELETE' AND NEW.retired_at IS NULL AND NEW.status = 'active';
BEGIN
    IF v_old AND v_new AND OLD.search_tsv = NEW.search_tsv
       AND OLD.search_tsv_simple = NEW.search_tsv_simple AND OLD.labels = NEW.labels THEN
        RETURN NULL;  -- e.g. an embedding backfill: nothing BM25 reads changed
    END IF;
    IF v_old THEN
        PERFORM brain_lexical_count(OLD.tenant_id, OLD.memory_id, OLD.namespace, OLD.user_id,
            OLD.session_id, OLD.labels, OLD.search_tsv, OLD.search_tsv_simple, -1);
    END IF;
    IF v_new THEN
        PERFORM brain_lexical_count(NEW.tenant_id, NEW.memory_id, NEW.namespace, NEW.user_id,
            NEW.session_id, NEW.labels, NEW.search_tsv, NEW.search_tsv_simple, 1);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER memories_lexical_stats AFTER INSERT OR UPDATE OR DELETE ON memories
    FOR EACH ROW EXECUTE FUNCTION brain_lexical_stats();

-- Recount one tenant from its rows in one pass (this migration, and bulk loads that
-- switch the trigger off, such as brain-bench's fill).
CREATE FUNCTION brain_rebuild_lexical_stats(p_tenant uuid) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    DELETE FROM lexical_terms WHERE tenant_id = p_tenant;
    INSERT INTO lexical_cells (tenant_id, namespace, user_id, session_id, labels)
    SELECT DISTINCT m.tenant_id, m.namespace, m.user_id, m.session_id,
           ARRAY(SELECT DISTINCT l FROM unnest(m.labels) l ORDER BY l)
    FROM memories m
    WHERE m.tenant_id = p_tenant AND m.retired_at IS NULL AND m.status = 'active'
    ON CONFLICT DO NOTHING;
    INSERT INTO lexical_terms (tenant_id, config, lexeme, cell_id, shard, df, total_length)
    SELECT p_tenant, x.config, x.lexeme, c.cell_id,
           abs(hashtext(m.memory_id::text)) % 16, count(*), sum(x.len)
    FROM memories m
    JOIN lexical_cells c ON c.tenant_id = m.tenant_id AND c.namespace = m.namespace
        AND c.user_id = m.user_id AND c.session_id = m.session_id
        AND c.labels = ARRAY(SELECT DISTINCT l FROM unnest(m.labels) l ORDER BY l)
    CROSS JOIN LATERAL (
        SELECT 'english' AS config, l AS lexeme, 0 AS len
        FROM unnest(tsvector_to_array(m.search_tsv)) l
        UNION ALL SELECT 'simple', l, 0 FROM unnest(tsvector_to_array(m.search_tsv_simple)) l
        UNION ALL SELECT 'english', '', length(m.search_tsv)
        UNION ALL SELECT 'simple', '', length(m.search_tsv_simple)
    ) x
    WHERE m.tenant_id = p_tenant AND m.retired_at IS NULL AND m.status = 'active'
    GROUP BY 1, 2, 3, 4, 5;
END
$$;
REVOKE ALL ON FUNCTION brain_rebuild_lexical_stats(uuid) FROM PUBLIC;

SELECT brain_rebuild_lexical_stats(tenant_id) FROM tenants;
