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
