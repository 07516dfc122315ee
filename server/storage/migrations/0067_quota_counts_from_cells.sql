-- Quotas: the tenant's memory count from the lexical statistics' cell counts, not a scan.
--
-- With a memory quota set, every adding write counts the tenant's active and candidate
-- memories under the quota lock (migration 0009). `count(*)` over every current row cost
-- 41 ms of PostgreSQL a save at 100,000 memories (brain-bench save-under-quota: 20.3 saves
-- a second against 58.3 without a quota), and grows with the tenant. Each visibility
-- cell's row count (lexeme '' of config 'english', migration 0010) counts exactly the
-- current active memories filed there, kept in the same transaction as every write that
-- adds, retires or moves one; the candidates, which the cells do not hold, are few (the
-- pending cap bounds them per namespace) and read by their partial index. The sum is the
-- same number (tests/test_quotas.py compares it with the scan), read per cell.
CREATE OR REPLACE FUNCTION brain_memories_used(p_tenant uuid)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    RETURN (SELECT COALESCE(sum(t.df), 0) FROM lexical_terms t
            WHERE t.tenant_id = p_tenant AND t.config = 'english' AND t.lexeme = '')
         + (SELECT count(*) FROM memories m
            WHERE m.tenant_id = p_tenant AND m.status = 'candidate'
              AND m.retired_at IS NULL);
END
$$;

-- Quotas count exactly what the writing key knows of, and round the rest (server/domain/
-- quotas.py). A key that forgets a successor it saved over another principal's memory
-- reopens that memory as its author's candidate, which row-level security then hides
-- from the key (a proposal is its proposer's and its reviewers'); counted as hidden, such
-- rows were a known number the key could move across the rounding. This counts them for
-- it: the current candidates this principal made what they are (`changed_by`) that are
-- not its own proposals (those it sees), in one namespace when given and, for the
-- pending cap, only the unexpired ones. Only the number crosses row-level security, for
-- the transaction's own tenant.
CREATE FUNCTION brain_candidates_reopened_by(
    p_tenant uuid, p_principal text, p_namespace text, p_unexpired boolean)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    IF p_tenant IS NULL OR p_tenant IS DISTINCT FROM brain_current_tenant() THEN
        RETURN 0;
    END IF;
    RETURN (SELECT count(*) FROM memories m
            WHERE m.tenant_id = p_tenant AND m.status = 'candidate'
              AND m.retired_at IS NULL
              AND m.changed_by = p_principal AND m.created_by <> p_principal
              AND (p_namespace IS NULL OR m.namespace = p_namespace)
              AND (NOT p_unexpired OR m.candidate_expires_at IS NULL
                   OR m.candidate_expires_at > now()));
END
$$;
REVOKE ALL ON FUNCTION brain_candidates_reopened_by(uuid, text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_candidates_reopened_by(uuid, text, text, boolean) TO brain_app;
