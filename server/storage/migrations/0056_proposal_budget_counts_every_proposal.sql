-- The hourly proposal budget counts every proposal of the key, and only those (issue 32).
--
-- The count ran as the caller, under row-level security, over the tenant's memories with no
-- index on the key: a proposal that had since become invisible to the key (approved, then
-- relabelled away from it) no longer counted, so the budget could be refilled and the number
-- it names told the key that some of its proposals were hidden; and the statement read the
-- tenant's memories, so its work grew with memories the key cannot see. Now a definer
-- function counts the calling key's own first versions of proposals (its key id is the
-- transaction's, set by the server) on an index of exactly those rows.

CREATE INDEX memories_proposals_by_key ON memories (tenant_id, changed_by_key, recorded_at)
    WHERE version = 1 AND change = 'propose';

-- The tenant is an argument (it must be the transaction's): on Citus the call then runs where
-- the tenant's shard is (migration 0059).
CREATE FUNCTION brain_proposals_since(p_tenant uuid, p_key_id text, p_since timestamptz)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    RETURN (SELECT count(*) FROM memories m
            WHERE m.tenant_id = p_tenant AND p_tenant = brain_current_tenant()
              AND p_key_id = COALESCE(current_setting('brain.key_id', true), '')
              AND p_key_id <> ''
              AND m.changed_by_key = p_key_id
              AND m.version = 1 AND m.change = 'propose' AND m.recorded_at > p_since);
END
$$;
REVOKE ALL ON FUNCTION brain_proposals_since(uuid, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_proposals_since(uuid, text, timestamptz) TO brain_app;

-- The namespace's pending-candidate cap (brain_pending_candidates, one bit across walls by
-- decision) counted on the bucket index, reading every current memory of the namespace;
-- now only its candidates are read.
CREATE INDEX memories_pending_by_namespace ON memories (tenant_id, namespace)
    WHERE status = 'candidate' AND retired_at IS NULL;
