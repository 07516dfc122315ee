-- Knowledge chunks keep a small form of their token vectors for late interaction
-- (domain/knowledge/late.py; docs: Knowledge base, Late interaction).
--
-- token_vectors: at most 64 int8 rows of 128 bytes (at most 8 KB, about 5.4 KB a chunk),
-- made by the filler from the same model run as the chunk's vector (the local embedder
-- only; other embedders store none). It is a column of the chunk's own row, so row-level
-- security (0020) covers it as it covers the text, and erasing a document blanks it with
-- the chunk's text and vector (storage/knowledge.py); retiring a version drops it (no
-- search reads a retired chunk). NULL: none yet; '' (empty): nothing to store for this
-- chunk (its tenant's embedder gives no token vectors).
ALTER TABLE document_chunks ADD COLUMN token_vectors bytea;

-- Chunks embedded before this release wait for their token vectors here (the filler's
-- backfill, when it has nothing else to do).
CREATE INDEX document_chunks_tokens_pending ON document_chunks (tenant_id)
    WHERE token_vectors IS NULL AND embedding IS NOT NULL AND retired_at IS NULL
      AND content <> '';

-- The filler's store (0032, 0062) with the token vectors beside the vector: both only on the
-- text they were made from (current, not erased), in one statement. The store without them
-- stays for servers of the previous release still running during an upgrade; what they
-- store gets its token vectors from the backfill below.
CREATE FUNCTION brain_store_chunk_embedding(
    p_tenant_id uuid, p_chunk_id uuid, p_content text, p_embedding vector, p_model text,
    p_token_vectors bytea
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    IF octet_length(p_token_vectors) > 8192 THEN
        RAISE EXCEPTION 'brain_store_chunk_embedding: token vectors over 8 KB';
    END IF;
    UPDATE document_chunks c
    SET embedding = p_embedding, embedding_model = p_model, token_vectors = p_token_vectors,
        embed_after = '-infinity'
    WHERE c.tenant_id = p_tenant_id AND c.chunk_id = p_chunk_id AND c.embedding IS NULL
      AND c.retired_at IS NULL AND c.content <> '' AND c.content = p_content;
    RETURN FOUND;
END
$$;

-- The backfill's claim: chunks with a vector of p_model but no token vectors, one tenant at
-- a time (as 0058), leased through embed_after (which the pending claim reads only for
-- chunks without a vector); nothing while chunks are being committed (ingest comes first).
CREATE FUNCTION brain_claim_chunk_token_vectors(
    p_limit integer, p_lease_seconds double precision, p_quiet_seconds double precision,
    p_model text
)
RETURNS TABLE (tenant_id uuid, chunk_id uuid, content text, heading_path text[])
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
#variable_conflict use_column
DECLARE
    v_tenant uuid;
    v_left integer := p_limit;
    v_claimed integer;
    v_now timestamptz := clock_timestamp();
BEGIN
    IF EXISTS (
        SELECT 1 FROM document_chunks c
        WHERE c.embedding IS NULL AND c.retired_at IS NULL AND c.content <> ''
          AND c.recorded_at > v_now - make_interval(secs => p_quiet_seconds)
    ) THEN
        RETURN;
    END IF;
    FOR v_tenant IN
        SELECT DISTINCT d.tenant_id FROM (
            SELECT c.tenant_id FROM document_chunks c
            WHERE c.token_vectors IS NULL AND c.embedding IS NOT NULL
              AND c.retired_at IS NULL AND c.content <> ''
              AND c.embedding_model = p_model AND c.embed_after <= v_now
            LIMIT p_limit) d
    LOOP
        EXIT WHEN v_left <= 0;
        RETURN QUERY
        WITH due AS (
            SELECT c.chunk_id FROM document_chunks c
            WHERE c.tenant_id = v_tenant
              AND c.token_vectors IS NULL AND c.embedding IS NOT NULL
              AND c.retired_at IS NULL AND c.content <> ''
              AND c.embedding_model = p_model AND c.embed_after <= v_now
            LIMIT v_left
            FOR UPDATE SKIP LOCKED
        )
        UPDATE document_chunks c
        SET embed_after = v_now + make_interval(secs => p_lease_seconds)
        FROM due WHERE c.tenant_id = v_tenant AND c.chunk_id = due.chunk_id
        RETURNING c.tenant_id, c.chunk_id, c.content, c.heading_path;
        GET DIAGNOSTICS v_claimed = ROW_COUNT;
        v_left := v_left - v_claimed;
    END LOOP;
END
$$;

-- The backfill's store: only on the text they were made from, beside a vector, once.
CREATE FUNCTION brain_store_chunk_token_vectors(
    p_tenant_id uuid, p_chunk_id uuid, p_content text, p_token_vectors bytea
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    IF p_token_vectors IS NULL OR octet_length(p_token_vectors) > 8192 THEN
        RAISE EXCEPTION 'brain_store_chunk_token_vectors: no token vectors, or over 8 KB';
    END IF;
    UPDATE document_chunks c
    SET token_vectors = p_token_vectors, embed_after = '-infinity'
    WHERE c.tenant_id = p_tenant_id AND c.chunk_id = p_chunk_id AND c.token_vectors IS NULL
      AND c.embedding IS NOT NULL AND c.retired_at IS NULL AND c.content <> ''
      AND c.content = p_content;
    RETURN FOUND;
END
$$;

REVOKE ALL ON FUNCTION brain_store_chunk_embedding(uuid, uuid, text, vector, text, bytea)
    FROM PUBLIC;
REVOKE ALL ON FUNCTION brain_claim_chunk_token_vectors(
    integer, double precision, double precision, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION brain_store_chunk_token_vectors(uuid, uuid, text, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_store_chunk_embedding(uuid, uuid, text, vector, text, bytea)
    TO brain_app;
GRANT EXECUTE ON FUNCTION brain_claim_chunk_token_vectors(
    integer, double precision, double precision, text) TO brain_app;
GRANT EXECUTE ON FUNCTION brain_store_chunk_token_vectors(uuid, uuid, text, bytea) TO brain_app;
