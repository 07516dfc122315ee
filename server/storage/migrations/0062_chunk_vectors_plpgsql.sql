-- The chunk filler's store and release as plpgsql, for Citus (issue 29; found by
-- make test-citus).
--
-- Migration 0032 wrote both as SQL-language functions with parameters over document_chunks,
-- which Citus cannot plan ("could not create distributed plan ... parameters in SQL
-- functions"; migration 0036 did the same for the request path): on a cluster no chunk
-- vector was ever stored. The release also set a per-row time inside CASE in one UPDATE
-- over every tenant's chunks, which Citus refuses across shards (non-IMMUTABLE functions in
-- CASE). Here each chunk is updated by its (tenant_id, chunk_id), one shard each, its
-- next attempt's time computed first. Same rows, same values on plain PostgreSQL.

CREATE OR REPLACE FUNCTION brain_store_chunk_embedding(
    p_tenant_id uuid, p_chunk_id uuid, p_content text, p_embedding vector, p_model text
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    UPDATE document_chunks c
    SET embedding = p_embedding, embedding_model = p_model, embed_after = '-infinity'
    WHERE c.tenant_id = p_tenant_id AND c.chunk_id = p_chunk_id AND c.embedding IS NULL
      AND c.retired_at IS NULL AND c.content <> '' AND c.content = p_content;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION brain_release_chunk_embeddings(
    p_tenant_ids uuid[], p_chunk_ids uuid[], p_failed boolean,
    p_base_seconds double precision, p_max_seconds double precision
) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_attempts integer;
    k record;
BEGIN
    FOR k IN SELECT * FROM unnest(p_tenant_ids, p_chunk_ids) AS u(tenant_id, chunk_id) LOOP
        IF p_failed THEN
            -- The wait is computed here, not in the UPDATE: Citus refuses a STABLE
            -- expression over a column (timestamptz + interval) in an UPDATE.
            SELECT c.embed_attempts INTO v_attempts FROM document_chunks c
            WHERE c.tenant_id = k.tenant_id AND c.chunk_id = k.chunk_id AND c.embedding IS NULL
            FOR UPDATE;
            CONTINUE WHEN NOT FOUND;
            UPDATE document_chunks c
            SET embed_attempts = v_attempts + 1,
                embed_after = v_now + make_interval(secs => least(
                    p_max_seconds, p_base_seconds * power(2, least(v_attempts, 30))))
            WHERE c.tenant_id = k.tenant_id AND c.chunk_id = k.chunk_id;
        ELSE
            UPDATE document_chunks c SET embed_after = '-infinity'
            WHERE c.tenant_id = k.tenant_id AND c.chunk_id = k.chunk_id AND c.embedding IS NULL;
        END IF;
    END LOOP;
END
$$;
