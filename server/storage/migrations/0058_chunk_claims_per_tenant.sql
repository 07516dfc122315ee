-- The chunk-vector filler claims one tenant's chunks at a time (issue 29).
--
-- The claim of 0035 locked due chunks of every tenant in one statement (`FOR UPDATE SKIP
-- LOCKED` over the whole table). Citus runs a locking read only on one shard ("could not run
-- distributed query with FOR UPDATE/SHARE commands"), so on a cluster every pass of every
-- filler failed. Now the tenants of the oldest due chunks are found first, without a lock
-- (a read Citus runs on every shard), and each tenant's chunks are claimed by a statement
-- pinned to that tenant, oldest first, up to what is left of the limit. The order is the
-- same as before across tenants (a tenant comes first when its oldest due chunk does), the
-- yield to ingest the same, and on PostgreSQL it is the same claim. The clock is read once
-- (Citus refuses a volatile function in an UPDATE it distributes).

CREATE OR REPLACE FUNCTION brain_claim_chunk_embeddings(
    p_limit integer, p_lease_seconds double precision,
    p_quiet_seconds double precision, p_yield_seconds double precision
)
RETURNS TABLE (tenant_id uuid, chunk_id uuid, content text, embed_attempts integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
#variable_conflict use_column
DECLARE
    v_busy boolean;
    v_tenant uuid;
    v_left integer := p_limit;
    v_claimed integer;
    -- One reading of the clock: Citus refuses a volatile call in an UPDATE it distributes.
    v_now timestamptz := clock_timestamp();
BEGIN
    SELECT EXISTS (
        SELECT 1 FROM document_chunks c
        WHERE c.embedding IS NULL AND c.retired_at IS NULL AND c.content <> ''
          AND c.recorded_at > v_now - make_interval(secs => p_quiet_seconds)
    ) INTO v_busy;
    FOR v_tenant IN
        SELECT d.tenant_id FROM (
            SELECT c.tenant_id, CASE WHEN v_busy THEN c.recorded_at ELSE c.embed_after END AS due_at
            FROM document_chunks c
            WHERE c.embedding IS NULL AND c.retired_at IS NULL AND c.content <> ''
              AND c.embed_after <= v_now
              -- Ingest is running: only chunks that waited long enough, oldest first.
              AND (NOT v_busy OR c.recorded_at
                                 <= v_now - make_interval(secs => p_yield_seconds))
            ORDER BY 2
            LIMIT p_limit) d
        GROUP BY d.tenant_id ORDER BY min(d.due_at)
    LOOP
        EXIT WHEN v_left <= 0;
        IF v_busy THEN
            RETURN QUERY
            WITH due AS (
                SELECT c.chunk_id FROM document_chunks c
                WHERE c.tenant_id = v_tenant
                  AND c.embedding IS NULL AND c.retired_at IS NULL AND c.content <> ''
                  AND c.recorded_at <= v_now - make_interval(secs => p_yield_seconds)
                  AND c.embed_after <= v_now
                ORDER BY c.recorded_at
                LIMIT v_left
                FOR UPDATE SKIP LOCKED
            )
            UPDATE document_chunks c
            SET embed_after = v_now + make_interval(secs => p_lease_seconds)
            FROM due WHERE c.tenant_id = v_tenant AND c.chunk_id = due.chunk_id
            RETURNING c.tenant_id, c.chunk_id, c.content, c.embed_attempts;
        ELSE
            RETURN QUERY
            WITH due AS (
                SELECT c.chunk_id FROM document_chunks c
                WHERE c.tenant_id = v_tenant
                  AND c.embedding IS NULL AND c.retired_at IS NULL AND c.content <> ''
                  AND c.embed_after <= v_now
                ORDER BY c.embed_after
                LIMIT v_left
                FOR UPDATE SKIP LOCKED
            )
            UPDATE document_chunks c
            SET embed_after = v_now + make_interval(secs => p_lease_seconds)
            FROM due WHERE c.tenant_id = v_tenant AND c.chunk_id = due.chunk_id
            RETURNING c.tenant_id, c.chunk_id, c.content, c.embed_attempts;
        END IF;
        GET DIAGNOSTICS v_claimed = ROW_COUNT;
        v_left := v_left - v_claimed;
    END LOOP;
END
$$;
