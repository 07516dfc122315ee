-- NOT the product schema: what the lab applies between `brain-admin migrate` and
-- distribute.sql so the cluster gets further (tests/citus.sh). The block is a change a
-- future migration must make (the other two the lab needed are migration 0036); until
-- then the shipped schema does not distribute. Run as the owner. See deploy/SCALING.md.

-- 1. "cannot create policy: Subqueries are not supported in policies on distributed
--    tables". The same rows, through invoker functions (the subquery stays under RLS).
-- plpgsql, not sql: Citus cannot plan a SQL function with parameters over distributed
-- tables (migration 0036); on the worker these read another distributed table from inside a
-- shard query, which needs citus.allow_nested_distributed_execution (tests/citus.sh).
CREATE FUNCTION brain_lexical_cell_visible(p_tenant uuid, p_cell bigint) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM lexical_cells c
                   WHERE c.tenant_id = p_tenant AND c.cell_id = p_cell);
END
$$;
CREATE FUNCTION brain_audit_cell_visible(p_tenant uuid, p_cell bigint) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM audit_cells c
                   WHERE c.tenant_id = p_tenant AND c.cell_id = p_cell);
END
$$;
CREATE FUNCTION brain_graph_entity_mentioned(p_tenant uuid, p_entity uuid) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM graph_mentions x
                   WHERE x.tenant_id = p_tenant AND x.entity_id = p_entity);
END
$$;
ALTER POLICY tenant_isolation ON lexical_terms
    USING (tenant_id = brain_current_tenant() AND brain_lexical_cell_visible(tenant_id, cell_id))
    WITH CHECK (tenant_id = brain_current_tenant()
                AND brain_lexical_cell_visible(tenant_id, cell_id));
ALTER POLICY tenant_isolation ON graph_entities
    USING (tenant_id = brain_current_tenant()
           AND brain_graph_entity_mentioned(tenant_id, entity_id))
    WITH CHECK (tenant_id = brain_current_tenant()
                AND brain_graph_entity_mentioned(tenant_id, entity_id));
ALTER POLICY tenant_isolation ON audit_cell_events
    USING (tenant_id = brain_current_tenant() AND brain_audit_cell_visible(tenant_id, cell_id))
    WITH CHECK (tenant_id = brain_current_tenant()
                AND brain_audit_cell_visible(tenant_id, cell_id));
