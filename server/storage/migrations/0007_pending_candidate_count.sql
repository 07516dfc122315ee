-- The namespace cap on pending candidates counts every pending candidate in the namespace
-- (issue 11). Since 0005 row-level security shows a proposal only to its proposer and to
-- reviewers, so a count the app role runs itself sees only the caller's own candidates and
-- the cap would bind each proposer separately. This definer function counts past
-- row-level security and answers only that number, only for the caller's tenant: no row,
-- id or content leaves it.
CREATE FUNCTION brain_pending_candidates(p_tenant uuid, p_namespace text)
RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
    SELECT count(*)
    FROM memories m
    WHERE m.tenant_id = p_tenant
      AND p_tenant = brain_current_tenant()
      AND m.namespace = p_namespace
      AND m.status = 'candidate'
      AND m.retired_at IS NULL
      AND (m.candidate_expires_at IS NULL OR m.candidate_expires_at > now())
$$;
REVOKE ALL ON FUNCTION brain_pending_candidates(uuid, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_pending_candidates(uuid, text) TO brain_app;

-- Every proposal counts them: pending candidates of a namespace by index.
CREATE INDEX memories_pending_candidates ON memories (tenant_id, namespace)
    WHERE status = 'candidate' AND retired_at IS NULL;
