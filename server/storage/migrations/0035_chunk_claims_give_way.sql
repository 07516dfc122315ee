-- The chunk-vector filler gives way to ingest (issue 31): while chunks keep being
-- committed (by a put in any process of any server on this database), fillers claim only
-- chunks that have waited p_yield_seconds, so a bulk ingest commits at the pace of the
-- database, the embeddings catch up once it is quiet, and an endless stream of puts
-- cannot starve the vectors.

CREATE INDEX document_chunks_pending_recorded ON document_chunks (recorded_at)
    WHERE embedding IS NULL AND retired_at IS NULL AND content <> '';

CREATE FUNCTION brain_claim_chunk_embeddings(
    p_limit integer, p_lease_seconds double precision,
    p_quiet_seconds double precision, p_yield_seconds double precision
)
RETURNS TABLE (tenant_id uuid, chunk_id uuid, content text, embed_attempts integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
#variable_conflict use_column
DECLARE
    v_busy boolean;
BEGIN
    SELECT EXISTS (
        SELECT 1 FROM document_chunks c
        WHERE c.embedding IS NULL AND c.retired_at IS NULL AND c.content <> ''
          AND c.recorded_at > clock_timestamp() - make_interval(secs => p_quiet_seconds)
    ) INTO v_busy;
    IF v_busy THEN
        -- Ingest is running: only chunks that waited long enough, oldest first.
        RETURN QUERY
        WITH due AS (
            SELECT c.tenant_id, c.chunk_id FROM document_chunks c
            WHERE c.embedding IS NULL AND c.retired_at IS NULL AND c.content <> ''
              AND c.recorded_at <= clock_timestamp() - make_interval(secs => p_yield_seconds)
              AND c.embed_after <= clock_timestamp()
            ORDER BY c.recorded_at
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        )
        UPDATE document_chunks c
        SET embed_after = clock_timestamp() + make_interval(secs => p_lease_seconds)
        FROM due WHERE c.tenant_id = due.tenant_id AND c.chunk_id = due.chunk_id
        RETURNING c.tenant_id, c.chunk_id, c.content, c.embed_attempts;
    ELSE
        RETURN QUERY
        WITH due AS (
            SELECT c.tenant_id, c.chunk_id FROM document_chunks c
            WHERE c.embedding IS NULL AND c.retired_at IS NULL AND c.content <> ''
              AND c.embed_after <= clock_timestamp()
            ORDER BY c.embed_after
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        )
        UPDATE document_chunks c
        SET embed_after = clock_timestamp() + make_interval(secs => p_lease_seconds)
        FROM due WHERE c.tenant_id = due.tenant_id AND c.chunk_id = due.chunk_id
        RETURNING c.tenant_id, c.chunk_id, c.content, c.embed_attempts;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION brain_claim_chunk_embeddings(
    integer, double precision, double precision, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_claim_chunk_embeddings(
    integer, double precision, double precision, double precision) TO brain_app;
-- The two-argument claim of 0032 is no longer called.
DROP FUNCTION brain_claim_chunk_embeddings(integer, double precision);
