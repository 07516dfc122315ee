-- Two changes a Citus cluster needs, the same on plain PostgreSQL (issue 29; tried by
-- make test-citus, deploy/SCALING.md).
--
-- 1. A trigger on a reference table fires on every placement: with `tenants` a reference
--    table, the coordinator and each worker appended the tenant-creation event, at once,
--    and the insert died in a distributed deadlock. Only the coordinator's placement
--    (Citus's local group 0) appends now; without Citus (no pg_dist_local_group) the
--    trigger appends as before.

CREATE OR REPLACE FUNCTION brain_audit_tenant_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_group integer;
BEGIN
    -- Dynamic SQL: the Citus catalog table does not exist on plain PostgreSQL.
    IF to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL THEN
        EXECUTE 'SELECT groupid FROM pg_catalog.pg_dist_local_group' INTO v_group;
        IF v_group <> 0 THEN
            RETURN NULL;
        END IF;
    END IF;
    PERFORM brain_audit_append(
        NEW.tenant_id, '', brain_audit_principal(), 'admin.tenants.create', '{}', 'created');
    RETURN NULL;
END
$$;

-- 2. Citus cannot plan SQL-language functions with parameters over distributed tables
--    ("could not create distributed plan ... Consider using PL/pgSQL functions instead").
--    The same statements as plpgsql. All five are SECURITY DEFINER with SET search_path,
--    which PostgreSQL never inlines, so the planner sees them as before.

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
