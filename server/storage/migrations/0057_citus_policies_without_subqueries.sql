-- On a Citus coordinator, row-level security policies without subqueries (issue 29).
--
-- create_distributed_table refuses a table whose policy holds a subquery ("Subqueries are
-- not supported in policies on distributed tables"): lexical_terms, graph_entities and
-- audit_cell_events each admit a row when a row of another table is visible. Where the
-- citus extension is installed (it is created before `brain-admin migrate` on a Citus
-- node, deploy/SCALING.md), the same rule goes through invoker functions: the row of the
-- other table is read as the caller, under that table's own policy, so the rows admitted
-- are the same. plpgsql, not sql: Citus cannot plan a SQL function with parameters over
-- distributed tables (migration 0036).
--
-- Plain PostgreSQL keeps the subqueries, which its planner can fold into the statement (a
-- per-row function call could not be): the statement below does nothing there. This was
-- deploy/citus/lab-overlay.sql.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    EXECUTE $f$
        CREATE FUNCTION brain_lexical_cell_visible(p_tenant uuid, p_cell bigint)
        RETURNS boolean
        LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public
        AS $b$
        BEGIN
            RETURN EXISTS (SELECT 1 FROM lexical_cells c
                           WHERE c.tenant_id = p_tenant AND c.cell_id = p_cell);
        END
        $b$ $f$;
    EXECUTE $f$
        CREATE FUNCTION brain_audit_cell_visible(p_tenant uuid, p_cell bigint)
        RETURNS boolean
        LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public
        AS $b$
        BEGIN
            RETURN EXISTS (SELECT 1 FROM audit_cells c
                           WHERE c.tenant_id = p_tenant AND c.cell_id = p_cell);
        END
        $b$ $f$;
    EXECUTE $f$
        CREATE FUNCTION brain_graph_entity_mentioned(p_tenant uuid, p_entity uuid)
        RETURNS boolean
        LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public
        AS $b$
        BEGIN
            RETURN EXISTS (SELECT 1 FROM graph_mentions x
                           WHERE x.tenant_id = p_tenant AND x.entity_id = p_entity);
        END
        $b$ $f$;
    ALTER POLICY tenant_isolation ON lexical_terms
        USING (tenant_id = brain_current_tenant()
               AND brain_lexical_cell_visible(tenant_id, cell_id))
        WITH CHECK (tenant_id = brain_current_tenant()
                    AND brain_lexical_cell_visible(tenant_id, cell_id));
    ALTER POLICY tenant_isolation ON audit_cell_events
        USING (tenant_id = brain_current_tenant()
               AND brain_audit_cell_visible(tenant_id, cell_id))
        WITH CHECK (tenant_id = brain_current_tenant()
                    AND brain_audit_cell_visible(tenant_id, cell_id));
    ALTER POLICY tenant_isolation ON graph_entities
        USING (tenant_id = brain_current_tenant()
               AND brain_graph_entity_mentioned(tenant_id, entity_id))
        WITH CHECK (tenant_id = brain_current_tenant()
                    AND brain_graph_entity_mentioned(tenant_id, entity_id));
END
$$;
