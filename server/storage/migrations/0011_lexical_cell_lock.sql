-- Writers of one visibility cell's term statistics take turns (see 0010 and README,
-- Scaling with bucket size): a transaction that both adds and retires rows of a cell
-- (a supersede, an update, an approval) updated two counter shards, and two such
-- transactions could lock the shared counter rows in opposite orders and deadlock.
-- A transaction-scoped advisory lock per cell, taken before the first counter update,
-- orders them; it is held until commit. Quota locks (0009) are always taken before it.

CREATE OR REPLACE FUNCTION brain_lexical_count(
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
    -- One writer per cell at a time, until it commits. Sorting one call's counter rows is
    -- not enough: a transaction that adds a new memory and retires the one it supersedes
    -- makes two calls on two shards, and two such transactions took the shared rows
    -- (the cell's '' row, common words) in opposite orders and deadlocked (ABORTED).
    PERFORM pg_advisory_xact_lock(hashtextextended(
        'brain.lexical/' || p_tenant::text || '/' || v_cell::text, 0));
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
