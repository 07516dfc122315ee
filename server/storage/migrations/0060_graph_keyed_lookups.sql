-- The entity graph at a cost that follows what a statement asks for, not the tenant's size.
--
-- Found by brain-eval conflicts: on tables without statistics (a new database, or a tenant
-- grown since the last ANALYZE) the planner estimates one row per tenant and picks plans
-- that scan a whole tenant, and row-level security checks each scanned row with a definer
-- call (brain_key_may_see_head).
--
-- An entity's policy asked "is any mention of it visible?" as an EXISTS the planner may
-- run as a hashed subplan: every mention of the tenant read, and its memory's head checked,
-- to show one entity. OFFSET 0 keeps the EXISTS a correlated probe of this entity's own
-- mentions (index graph_mentions_entity), stopping at the first visible one. Same rule,
-- same answers.
ALTER POLICY tenant_isolation ON graph_entities
    USING (tenant_id = brain_current_tenant() AND EXISTS (
        SELECT 1 FROM graph_mentions x
        WHERE x.tenant_id = graph_entities.tenant_id AND x.entity_id = graph_entities.entity_id
        OFFSET 0))
    WITH CHECK (tenant_id = brain_current_tenant() AND EXISTS (
        SELECT 1 FROM graph_mentions x
        WHERE x.tenant_id = graph_entities.tenant_id AND x.entity_id = graph_entities.entity_id
        OFFSET 0));

-- Reopening a closed fact finds the copies that replaced a row by that row's id.
CREATE INDEX graph_relations_replaces ON graph_relations (tenant_id, replaces)
    WHERE replaces IS NOT NULL;

-- Undo the closes p_memory made (and with p_closed those of its own facts): as in migration
-- 0031, each copy is deleted and the row it replaced believed again for as long as the copy
-- was. Each step now reads or writes single rows by key; the self-joins of 0031 let the
-- planner scan the tenant's relations once per row of the tenant.
CREATE OR REPLACE FUNCTION brain_graph_reopen(p_memory uuid, p_closed boolean) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_tenant uuid := brain_current_tenant();
    v_copy record;
    v_replaces uuid;
    v_retired timestamptz;
    v_reopened integer := 0;
BEGIN
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'brain_graph_reopen: no tenant in this transaction';
    END IF;
    FOR v_copy IN
        SELECT relation_id FROM graph_relations
        WHERE tenant_id = v_tenant
          AND (closed_by = p_memory
               OR (p_closed AND memory_id = p_memory AND closed_by IS NOT NULL))
        ORDER BY recorded_at, relation_id
    LOOP
        -- Read again: an earlier step of this loop may have moved its pointer.
        SELECT c.replaces, c.retired_at INTO v_replaces, v_retired
        FROM graph_relations c
        WHERE c.tenant_id = v_tenant AND c.relation_id = v_copy.relation_id;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        UPDATE graph_relations SET retired_at = v_retired
        WHERE tenant_id = v_tenant AND relation_id = v_replaces;
        -- A later close of the copy now replaces the reopened row.
        UPDATE graph_relations SET replaces = v_replaces
        WHERE tenant_id = v_tenant AND replaces = v_copy.relation_id;
        DELETE FROM graph_relations WHERE tenant_id = v_tenant AND relation_id = v_copy.relation_id;
        v_reopened := v_reopened + 1;
    END LOOP;
    RETURN v_reopened;
END
$$;
