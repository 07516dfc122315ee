-- NOT the product schema: what the lab applies between `brain-admin migrate` and
-- distribute.sql so the cluster gets further (tests/citus.sh). Each block is a change a
-- future migration must make, in a form that is the same on plain PostgreSQL; until then
-- the shipped schema does not distribute. Run as the owner. See deploy/SCALING.md.

-- 1. "cannot create policy: Subqueries are not supported in policies on distributed
--    tables". The same rows, through invoker functions (the subquery stays under RLS).
-- plpgsql, not sql: Citus cannot plan a SQL function with parameters over distributed
-- tables (item 3 below); on the worker these read another distributed table from inside a
-- shard query, which needs citus.allow_nested_distributed_execution (tests/citus.sh).
CREATE FUNCTION brain_lexical_cell_visible(p_tenant uuid, p_cell bigint) RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM lexical_cells c
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

-- 2. A trigger on a reference table fires on every placement (coordinator and each
--    worker): the tenant-creation event was appended once per node, concurrently, and the
--    insert died in a distributed deadlock. Only the coordinator's placement appends.
CREATE OR REPLACE FUNCTION brain_audit_tenant_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    IF to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL
       AND (SELECT groupid FROM pg_catalog.pg_dist_local_group) <> 0 THEN
        RETURN NULL;
    END IF;
    PERFORM brain_audit_append(
        NEW.tenant_id, '', brain_audit_principal(), 'admin.tenants.create', '{}', 'created');
    RETURN NULL;
END
$$;

-- 3. "could not create distributed plan: Possibly this is caused by the use of parameters
--    in SQL functions, which is not supported in Citus. HINT: Consider using PL/pgSQL".
--    These are SECURITY DEFINER with SET search_path, so PostgreSQL never inlined them:
--    as plpgsql they plan no worse there.
CREATE OR REPLACE FUNCTION brain_lookup_key(p_key_id text)
RETURNS TABLE (
    tenant_id uuid, tenant_name text, key_id text, secret_hash bytea, principal text,
    permissions text[], confine_user_id text, confine_namespaces text[],
    confine_session_id text, labels text[], expires_at timestamptz, revoked_at timestamptz
)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT k.tenant_id, t.name, k.key_id, k.secret_hash, k.principal, k.permissions,
           k.confine_user_id, k.confine_namespaces, k.confine_session_id, k.labels,
           k.expires_at, k.revoked_at
    FROM api_keys k JOIN tenants t USING (tenant_id)
    WHERE k.key_id = p_key_id;
END
$$;
CREATE OR REPLACE FUNCTION brain_touch_key(p_key_id text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    UPDATE api_keys SET last_used_at = date_trunc('minute', now())
    WHERE key_id = p_key_id
      AND (last_used_at IS NULL OR last_used_at < date_trunc('minute', now()));
END
$$;
CREATE OR REPLACE FUNCTION brain_key_may_see_head(p_tenant uuid, p_memory_id uuid)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    RETURN COALESCE((
        SELECT brain_key_may_see(h.labels, h.namespace, h.user_id, h.session_id)
               AND brain_key_may_see_proposal(h.status, h.created_by)
        FROM memories h
        WHERE h.tenant_id = p_tenant AND h.memory_id = p_memory_id
          AND p_tenant = brain_current_tenant()
        ORDER BY h.version DESC
        LIMIT 1), false);
END
$$;
CREATE OR REPLACE FUNCTION brain_pending_candidates(p_tenant uuid, p_namespace text)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    RETURN (SELECT count(*) FROM memories m
            WHERE m.tenant_id = p_tenant AND p_tenant = brain_current_tenant()
              AND m.namespace = p_namespace AND m.status = 'candidate'
              AND m.retired_at IS NULL
              AND (m.candidate_expires_at IS NULL OR m.candidate_expires_at > now()));
END
$$;
CREATE OR REPLACE FUNCTION brain_memories_used(p_tenant uuid)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    RETURN (SELECT count(*) FROM memories m
            WHERE m.tenant_id = p_tenant AND m.retired_at IS NULL
              AND m.status IN ('active', 'candidate'));
END
$$;
