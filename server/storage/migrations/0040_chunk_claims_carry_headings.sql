-- Chunk vectors are made from a chunk's heading path and its text (issue 31), so a piece
-- cut from the middle of a long section still says where it belongs; the server sizes
-- chunks so that both fit the local model's window (domain/knowledge/measures.py). The
-- claim hands the filler the heading path with the text. Same statements as 0035
-- otherwise; the store still checks the text the vector was made from (the heading path
-- changes only when the chunk is erased, and then its text is blank).

DROP FUNCTION brain_claim_chunk_embeddings(
    integer, double precision, double precision, double precision);

CREATE FUNCTION brain_claim_chunk_embeddings(
    p_limit integer, p_lease_seconds double precision,
    p_quiet_seconds double precision, p_yield_seconds double precision
)
RETURNS TABLE (
    tenant_id uuid, chunk_id uuid, content text, heading_path text[], embed_attempts integer
)
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
        RETURNING c.tenant_id, c.chunk_id, c.content, c.heading_path, c.embed_attempts;
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
        RETURNING c.tenant_id, c.chunk_id, c.content, c.heading_path, c.embed_attempts;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION brain_claim_chunk_embeddings(
    integer, double precision, double precision, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_claim_chunk_embeddings(
    integer, double precision, double precision, double precision) TO brain_app;
