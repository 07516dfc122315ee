-- The entity graph at a cost that follows what a statement asks for, not the tenant's size.
--
-- Found by brain-eval conflicts: on tables without statistics (a new database, or a tenant
-- grown since the last ANALYZE) the planner estimates one row per tenant and picks plans
-- that scan a whole tenant, and row-level security checks each scanned row with a definer
-- call (brain_key_may_see_head). The statements of graph writes now read by key
-- (storage/graph.py, "Keyed lookups"); this is the database's side.
--
-- An entity's policy asks "is any mention of it visible?" as an EXISTS the planner may run
-- as a hashed subplan: every mention of the tenant read, and its memory's head checked, to
-- show one entity. OFFSET 0 keeps the EXISTS a correlated probe of this entity's own
-- mentions (index graph_mentions_entity) that stops at the first visible one. Same rule,
-- same rows. On a Citus node the policy is an invoker function already (migration 0057),
-- which probes the same way, and a subquery would be refused there: left as it is.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    ALTER POLICY tenant_isolation ON graph_entities
        USING (tenant_id = brain_current_tenant() AND EXISTS (
            SELECT 1 FROM graph_mentions x
            WHERE x.tenant_id = graph_entities.tenant_id
              AND x.entity_id = graph_entities.entity_id
            OFFSET 0))
        WITH CHECK (tenant_id = brain_current_tenant() AND EXISTS (
            SELECT 1 FROM graph_mentions x
            WHERE x.tenant_id = graph_entities.tenant_id
              AND x.entity_id = graph_entities.entity_id
            OFFSET 0));
END
$$;

-- Reopening a closed fact finds the copies that replaced a row by that row's id.
CREATE INDEX graph_relations_replaces ON graph_relations (tenant_id, replaces)
    WHERE replaces IS NOT NULL;

-- Undo the closes p_memory made (and with p_closed those of its own facts), as in
-- migrations 0031 and 0059: each copy is deleted and the row it replaced believed again
-- for as long as the copy was. Each step now reads or writes rows by key; 0059's
-- self-joins let the planner scan the tenant's relations once per row of the tenant. (The
-- tenant-less version of 0031 stays as it was, for servers of earlier releases.)
CREATE OR REPLACE FUNCTION brain_graph_reopen(p_tenant uuid, p_memory uuid, p_closed boolean)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_copy record;
    v_replaces uuid;
    v_retired timestamptz;
    v_reopened integer := 0;
BEGIN
    IF p_tenant IS NULL OR p_tenant IS DISTINCT FROM brain_current_tenant() THEN
        RAISE EXCEPTION 'brain_graph_reopen: not this transaction''s tenant';
    END IF;
    FOR v_copy IN
        SELECT relation_id FROM graph_relations
        WHERE tenant_id = p_tenant
          AND (closed_by = p_memory
               OR (p_closed AND memory_id = p_memory AND closed_by IS NOT NULL))
        ORDER BY recorded_at, relation_id
    LOOP
        -- Read again: an earlier step of this loop may have moved its pointer.
        SELECT c.replaces, c.retired_at INTO v_replaces, v_retired
        FROM graph_relations c
        WHERE c.tenant_id = p_tenant AND c.relation_id = v_copy.relation_id;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        UPDATE graph_relations SET retired_at = v_retired
        WHERE tenant_id = p_tenant AND relation_id = v_replaces;
        -- A later close of the copy now replaces the reopened row.
        UPDATE graph_relations SET replaces = v_replaces
        WHERE tenant_id = p_tenant AND replaces = v_copy.relation_id;
        DELETE FROM graph_relations WHERE tenant_id = p_tenant AND relation_id = v_copy.relation_id;
        v_reopened := v_reopened + 1;
    END LOOP;
    RETURN v_reopened;
END
$$;
