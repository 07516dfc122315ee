-- Documents count in tenant quotas (issue 31): how many current documents a tenant may
-- store and how many bytes of content they may hold, set with `brain-admin tenants
-- set-quota --documents N --document-bytes N`. NULL: unlimited, as for memories.

ALTER TABLE tenant_quotas
    ADD COLUMN max_documents bigint CHECK (max_documents IS NULL OR max_documents >= 0),
    ADD COLUMN max_document_bytes bigint
        CHECK (max_document_bytes IS NULL OR max_document_bytes >= 0);

-- What the document quotas count: a tenant's current, undeleted documents and the bytes
-- of their content (older versions and deleted documents no longer count). Shared by the
-- put's check below and by brain-admin's usage figures.
CREATE FUNCTION brain_documents_used(p_tenant uuid)
RETURNS TABLE (documents bigint, document_bytes bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    RETURN QUERY
    SELECT count(*), COALESCE(sum(d.size_bytes), 0)::bigint FROM documents d
    WHERE d.tenant_id = p_tenant AND d.retired_at IS NULL AND d.status = 'active';
END
$$;
REVOKE ALL ON FUNCTION brain_documents_used(uuid) FROM PUBLIC;

-- Called in a put's own transaction before it stores a version. As for memories (0009,
-- and 0059's tenant argument): with a quota set it takes a per-tenant transaction lock
-- first, so concurrent puts are counted one after another and cannot overshoot together,
-- and it counts the whole tenant, not only what the caller's key may see (a confined key
-- must not undercount). It answers only for the transaction's own tenant; no row back: the
-- tenant has no document quota. Its tenant is an argument, so on Citus the call runs on
-- the tenant's shard (deploy/citus/distribute.sql).
CREATE FUNCTION brain_reserve_documents(p_tenant uuid)
RETURNS TABLE (max_documents bigint, max_document_bytes bigint, documents bigint,
               document_bytes bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_max bigint;
    v_max_bytes bigint;
BEGIN
    IF p_tenant IS NULL OR p_tenant IS DISTINCT FROM brain_current_tenant() THEN
        RETURN;
    END IF;
    SELECT q.max_documents, q.max_document_bytes INTO v_max, v_max_bytes
    FROM tenant_quotas q WHERE q.tenant_id = p_tenant;
    IF v_max IS NULL AND v_max_bytes IS NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('brain.quota.documents/' || p_tenant, 0));
    RETURN QUERY SELECT v_max, v_max_bytes, u.documents, u.document_bytes
                 FROM brain_documents_used(p_tenant) u;
END
$$;
REVOKE ALL ON FUNCTION brain_reserve_documents(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_reserve_documents(uuid) TO brain_app;

-- Setting a quota stays one admin event in the tenant's audit chain, now naming every
-- limit that is set (memories always, as before; the document limits when set).
CREATE OR REPLACE FUNCTION brain_audit_quota_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    PERFORM brain_audit_append(
        NEW.tenant_id, '', brain_audit_principal(), 'admin.tenants.set_quota', '{}',
        format('memories=%s', COALESCE(NEW.max_memories::text, 'none'))
        || CASE WHEN NEW.max_documents IS NULL AND NEW.max_document_bytes IS NULL THEN ''
                ELSE format(' documents=%s document_bytes=%s',
                            COALESCE(NEW.max_documents::text, 'none'),
                            COALESCE(NEW.max_document_bytes::text, 'none')) END);
    RETURN NULL;
END
$$;
