-- Chunk vectors follow a put in the background (issue 31): a put commits a document and
-- its chunks without vectors, lexically searchable at once, and each server process runs
-- a filler that embeds pending chunks in batches (domain/knowledge/filler.py).
--
-- A chunk is pending while it is current, not erased and has no vector. Two columns,
-- holding no content, say when a filler may take it:
--   embed_after    a filler's claim (its lease) or a failure's backoff; '-infinity' = now
--   embed_attempts failed embedder calls so far (for backoff and brain-admin's status)
-- Row-level security on document_chunks (0020) covers them as every other column.

ALTER TABLE document_chunks
    ADD COLUMN embed_after timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN embed_attempts integer NOT NULL DEFAULT 0 CHECK (embed_attempts >= 0);
CREATE INDEX document_chunks_pending ON document_chunks (embed_after)
    WHERE embedding IS NULL AND retired_at IS NULL AND content <> '';

-- The filler works for every tenant of the database, not for a key, so it reaches the
-- chunks through these three functions (as the audit chain is reached through its own):
-- the app role gets no policy past row-level security, only these narrow doors. A claim
-- takes due pending chunks with FOR UPDATE SKIP LOCKED and leases them in one short
-- statement, so the workers of a server (or several servers) never embed a chunk twice
-- while a lease holds, and a filler that dies loses nothing: its lease runs out.
CREATE FUNCTION brain_claim_chunk_embeddings(p_limit integer, p_lease_seconds double precision)
RETURNS TABLE (tenant_id uuid, chunk_id uuid, content text, embed_attempts integer)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
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
    RETURNING c.tenant_id, c.chunk_id, c.content, c.embed_attempts
$$;

-- Store a vector only on the text it was made from: a chunk retired, erased or (never
-- today) rewritten since the claim keeps no vector. The UPDATE re-reads the row after any
-- concurrent delete commits, so a delete racing the filler always wins.
CREATE FUNCTION brain_store_chunk_embedding(
    p_tenant_id uuid, p_chunk_id uuid, p_content text, p_embedding vector, p_model text
) RETURNS boolean
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
    WITH stored AS (
        UPDATE document_chunks c
        SET embedding = p_embedding, embedding_model = p_model, embed_after = '-infinity'
        WHERE c.tenant_id = p_tenant_id AND c.chunk_id = p_chunk_id AND c.embedding IS NULL
          AND c.retired_at IS NULL AND c.content <> '' AND c.content = p_content
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM stored)
$$;

-- Give claimed chunks back: after a failure (p_failed) each waits p_base_seconds doubled
-- per earlier failure, at most p_max_seconds; otherwise (a filler stopping) at once.
CREATE FUNCTION brain_release_chunk_embeddings(
    p_tenant_ids uuid[], p_chunk_ids uuid[], p_failed boolean,
    p_base_seconds double precision, p_max_seconds double precision
) RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
    UPDATE document_chunks c
    SET embed_attempts = c.embed_attempts + (CASE WHEN p_failed THEN 1 ELSE 0 END),
        embed_after = CASE WHEN p_failed
            THEN clock_timestamp() + make_interval(secs => least(
                p_max_seconds, p_base_seconds * power(2, least(c.embed_attempts, 30))))
            ELSE '-infinity' END
    FROM unnest(p_tenant_ids, p_chunk_ids) AS k(tenant_id, chunk_id)
    WHERE c.tenant_id = k.tenant_id AND c.chunk_id = k.chunk_id AND c.embedding IS NULL
$$;

REVOKE ALL ON FUNCTION brain_claim_chunk_embeddings(integer, double precision) FROM PUBLIC;
REVOKE ALL ON FUNCTION brain_store_chunk_embedding(uuid, uuid, text, vector, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION brain_release_chunk_embeddings(
    uuid[], uuid[], boolean, double precision, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_claim_chunk_embeddings(integer, double precision) TO brain_app;
GRANT EXECUTE ON FUNCTION brain_store_chunk_embedding(uuid, uuid, text, vector, text) TO brain_app;
GRANT EXECUTE ON FUNCTION brain_release_chunk_embeddings(
    uuid[], uuid[], boolean, double precision, double precision) TO brain_app;
