-- Per-tenant quotas, set by `brain-admin tenants set-quota` (the owner role). A tenant
-- without a row, or with a NULL limit, is unlimited.
CREATE TABLE tenant_quotas (
    tenant_id    uuid PRIMARY KEY REFERENCES tenants (tenant_id),
    max_memories bigint CHECK (max_memories IS NULL OR max_memories >= 0),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
SELECT brain_protect_table('tenant_quotas');
GRANT SELECT ON tenant_quotas TO brain_app;

-- The stored memories a quota counts: current versions that are active or candidate.
-- Superseded, retracted, rejected and withdrawn memories keep their history but no
-- longer count. Shared by the write check below and by brain-admin's usage figures.
CREATE FUNCTION brain_memories_used(p_tenant uuid) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
    SELECT count(*) FROM memories m
    WHERE m.tenant_id = p_tenant AND m.retired_at IS NULL
      AND m.status IN ('active', 'candidate')
$$;
REVOKE ALL ON FUNCTION brain_memories_used(uuid) FROM PUBLIC;

-- Called in the write's own transaction before it adds memories. With a quota set it
-- takes a per-tenant transaction lock first, so concurrent writers are counted one after
-- another (each count is a new READ COMMITTED snapshot, after the previous holder
-- committed) and cannot overshoot together. It counts every memory of the caller's
-- tenant, not only those the caller's key may see: a confined key must not undercount.
-- No row back: the tenant has no memory quota.
CREATE FUNCTION brain_reserve_memories() RETURNS TABLE (max_memories bigint, used bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_tenant uuid := brain_current_tenant();
    v_max bigint;
BEGIN
    SELECT q.max_memories INTO v_max FROM tenant_quotas q WHERE q.tenant_id = v_tenant;
    IF v_tenant IS NULL OR v_max IS NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('brain.quota.memories/' || v_tenant, 0));
    RETURN QUERY SELECT v_max, brain_memories_used(v_tenant);
END
$$;
REVOKE ALL ON FUNCTION brain_reserve_memories() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_reserve_memories() TO brain_app;

-- Setting or lifting a quota is an admin event in the tenant's audit chain.
CREATE FUNCTION brain_audit_quota_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    PERFORM brain_audit_append(
        NEW.tenant_id, '', brain_audit_principal(), 'admin.tenants.set_quota', '{}',
        format('memories=%s', COALESCE(NEW.max_memories::text, 'none')));
    RETURN NULL;
END
$$;

CREATE TRIGGER tenant_quotas_audit AFTER INSERT OR UPDATE ON tenant_quotas
    FOR EACH ROW EXECUTE FUNCTION brain_audit_quota_event();
