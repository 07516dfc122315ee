-- Chunk vectors are made from a chunk's heading path and its text (issue 31), so a piece
-- cut from the middle of a long section still says where it belongs; the server sizes
-- chunks so that both fit the local model's window (domain/knowledge/measures.py).
--
-- The filler claims chunks through brain_claim_chunk_embeddings (0032, 0035), which hands
-- it their text; this fourth narrow door hands it their heading paths: of one tenant's
-- chunks, by id, only while they are pending (current, not erased, without a vector), as
-- the claim returns them. Its tenant is an argument, so on Citus the call runs on the
-- tenant's shard (as 0059's functions). The store still checks the text a vector was made
-- from: a heading path changes only when the chunk is erased, and then its text is blank.

CREATE FUNCTION brain_chunk_embedding_headings(p_tenant uuid, p_chunk_ids uuid[])
RETURNS TABLE (chunk_id uuid, heading_path text[])
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT c.chunk_id, c.heading_path FROM document_chunks c
    WHERE c.tenant_id = p_tenant AND c.chunk_id = ANY (p_chunk_ids)
      AND c.embedding IS NULL AND c.retired_at IS NULL AND c.content <> '';
END
$$;
REVOKE ALL ON FUNCTION brain_chunk_embedding_headings(uuid, uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_chunk_embedding_headings(uuid, uuid[]) TO brain_app;
