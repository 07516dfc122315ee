-- A memory is one object for visibility (issue 11): every version of a memory is visible
-- exactly when its head (highest version; the current one) is, and a memory that was never
-- admitted (its head a candidate, or a rejected or withdrawn proposal) is visible only to
-- its proposer and to keys with memories:review. Row-level security gets the same rule as
-- the application's visibility predicate (server/storage/visibility.py).
--
-- The server sets brain.may_review ('on' for keys with memories:review) and brain.principal
-- per transaction, beside the labels and confinement it already sets.

CREATE FUNCTION brain_key_may_see_proposal(p_status text, p_created_by text)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT p_status NOT IN ('candidate', 'rejected', 'withdrawn')
        OR COALESCE(current_setting('brain.may_review', true), '') = 'on'
        OR p_created_by = COALESCE(current_setting('brain.principal', true), '')
$$;

-- The head of a memory, read past row-level security (a policy cannot query its own
-- table): only ever answers for the caller's tenant, and only "visible or not".
CREATE FUNCTION brain_key_may_see_head(p_tenant uuid, p_memory_id uuid)
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
    SELECT COALESCE((
        SELECT brain_key_may_see(h.labels, h.namespace, h.user_id, h.session_id)
               AND brain_key_may_see_proposal(h.status, h.created_by)
        FROM memories h
        WHERE h.tenant_id = p_tenant AND h.memory_id = p_memory_id
          AND p_tenant = brain_current_tenant()
        ORDER BY h.version DESC
        LIMIT 1), false)
$$;
REVOKE ALL ON FUNCTION brain_key_may_see_head(uuid, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_key_may_see_head(uuid, uuid) TO brain_app;

-- Current rows are checked on themselves (the fast path of every recall); an older
-- version asks its head. Mid-write, after a version is closed and before its successor
-- is inserted, the closed version is the highest and so still its own head.
ALTER POLICY tenant_isolation ON memories
    USING (tenant_id = brain_current_tenant()
           AND CASE WHEN retired_at IS NULL
                    THEN brain_key_may_see(labels, namespace, user_id, session_id)
                         AND brain_key_may_see_proposal(status, created_by)
                    ELSE brain_key_may_see_head(tenant_id, memory_id) END)
    WITH CHECK (tenant_id = brain_current_tenant()
                AND CASE WHEN retired_at IS NULL
                         THEN brain_key_may_see(labels, namespace, user_id, session_id)
                              AND brain_key_may_see_proposal(status, created_by)
                         ELSE brain_key_may_see_head(tenant_id, memory_id) END);

-- The application's predicate tests scope on any version directly (so indexes apply):
-- that is the head's scope only because a memory never changes namespace, user or session.
-- Hold that for every writer, brain-admin included.
CREATE FUNCTION brain_memory_scope_is_fixed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    IF TG_OP = 'UPDATE' OR EXISTS (
        SELECT 1 FROM memories p
        WHERE p.tenant_id = NEW.tenant_id AND p.memory_id = NEW.memory_id
          AND (p.namespace, p.user_id, p.session_id)
              IS DISTINCT FROM (NEW.namespace, NEW.user_id, NEW.session_id))
    THEN
        RAISE EXCEPTION 'memory %: namespace, user_id and session_id never change; save a new memory instead', NEW.memory_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION brain_memory_scope_is_fixed() FROM PUBLIC;
CREATE TRIGGER memories_scope_fixed_insert BEFORE INSERT ON memories
    FOR EACH ROW WHEN (NEW.version > 1) EXECUTE FUNCTION brain_memory_scope_is_fixed();
CREATE TRIGGER memories_scope_fixed_update BEFORE UPDATE OF namespace, user_id, session_id
    ON memories FOR EACH ROW
    WHEN ((OLD.namespace, OLD.user_id, OLD.session_id)
          IS DISTINCT FROM (NEW.namespace, NEW.user_id, NEW.session_id))
    EXECUTE FUNCTION brain_memory_scope_is_fixed();

-- Idempotency records hold no content, so forgetting reaches every copy: a replay re-reads
-- the memory through the visibility predicate. Records written before this migration held
-- whole responses (content included) and are dropped; a retry of such a request is
-- answered by dedupe instead.
DELETE FROM idempotency_keys;
ALTER TABLE idempotency_keys DROP COLUMN response;
ALTER TABLE idempotency_keys ADD COLUMN memory_id uuid;
