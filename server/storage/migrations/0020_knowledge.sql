-- Knowledge base (issue 18): documents in named collections, versioned like memories, cut
-- into chunks that the retrieval lanes search.
--
-- A document is one object for visibility, like a memory: its scope (namespace, user,
-- session), collection and path never change, and its labels are the same on every
-- version and every chunk (a re-put that changes them rewrites them all in one
-- transaction). So each row carries what the one visibility predicate needs, row-level
-- security checks it on the row itself, and a search over chunks needs no join.
--
-- Versions: a put with new content closes the current version (retired_at) and inserts
-- the next with its chunks; the old chunks are retired with it. Delete is erasure: every
-- version's content, path and hash and every chunk's text, headings and vector are
-- blanked, and a last version with status 'deleted' records it. Ids, times and the audit
-- events (written by triggers, never holding content) remain.

CREATE TABLE documents (
    tenant_id       uuid NOT NULL REFERENCES tenants (tenant_id),
    document_id     uuid NOT NULL,
    version         integer NOT NULL CHECK (version >= 1),
    namespace       text NOT NULL CHECK (namespace <> ''),
    user_id         text NOT NULL DEFAULT '',
    session_id      text NOT NULL DEFAULT '',
    collection      text NOT NULL CHECK (collection <> ''),
    path            text NOT NULL,  -- '' once erased
    format          text NOT NULL CHECK (format IN ('markdown', 'python', 'code', 'text')),
    labels          text[] NOT NULL CHECK (cardinality(labels) >= 1 AND array_position(labels, NULL) IS NULL),
    status          text NOT NULL CHECK (status IN ('active', 'deleted')),
    content         text NOT NULL,
    content_hash    bytea,
    size_bytes      integer NOT NULL DEFAULT 0,
    chunk_count     integer NOT NULL DEFAULT 0,
    recorded_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    retired_at      timestamptz,
    created_by      text NOT NULL,
    changed_by      text NOT NULL,
    changed_by_key  text NOT NULL,
    change          text NOT NULL,
    PRIMARY KEY (tenant_id, document_id, version),
    CHECK (retired_at IS NULL OR recorded_at <= retired_at)
);
CREATE UNIQUE INDEX documents_current ON documents (tenant_id, document_id) WHERE retired_at IS NULL;
-- Finding the live document at a path (no unique index: a document the caller cannot see
-- must not make its path answer differently, so two may share one, see knowledge.py).
CREATE INDEX documents_path ON documents (tenant_id, namespace, user_id, session_id, collection, path)
    WHERE retired_at IS NULL;

CREATE TABLE document_chunks (
    tenant_id       uuid NOT NULL,
    chunk_id        uuid NOT NULL,
    document_id     uuid NOT NULL,
    version         integer NOT NULL,
    chunk_no        integer NOT NULL CHECK (chunk_no >= 0),
    namespace       text NOT NULL,
    user_id         text NOT NULL DEFAULT '',
    session_id      text NOT NULL DEFAULT '',
    collection      text NOT NULL,
    path            text NOT NULL,
    labels          text[] NOT NULL CHECK (cardinality(labels) >= 1 AND array_position(labels, NULL) IS NULL),
    content         text NOT NULL,
    heading_path    text[] NOT NULL DEFAULT '{}',
    line_start      integer NOT NULL,
    line_end        integer NOT NULL,
    recorded_at     timestamptz NOT NULL,
    retired_at      timestamptz,
    embedding       vector,
    embedding_model text,
    search_tsv        tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
    search_tsv_simple tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED,
    PRIMARY KEY (tenant_id, chunk_id),
    UNIQUE (tenant_id, document_id, version, chunk_no),
    FOREIGN KEY (tenant_id, document_id, version) REFERENCES documents (tenant_id, document_id, version)
);
CREATE INDEX document_chunks_bucket ON document_chunks (tenant_id, namespace, user_id, session_id, collection)
    WHERE retired_at IS NULL;
CREATE INDEX document_chunks_tsv ON document_chunks USING gin (search_tsv);
CREATE INDEX document_chunks_tsv_simple ON document_chunks USING gin (search_tsv_simple);

-- Chunk vectors have the dimension memories have (384 unless `brain-admin embeddings
-- set-dimension` changed it before this migration ran).
DO $$
BEGIN
    EXECUTE format('ALTER TABLE document_chunks ALTER COLUMN embedding TYPE vector(%s)',
                   (SELECT atttypmod FROM pg_attribute
                    WHERE attrelid = 'memories'::regclass AND attname = 'embedding'));
END
$$;
CREATE INDEX document_chunks_embedding_hnsw ON document_chunks
    USING hnsw (embedding vector_cosine_ops) WHERE retired_at IS NULL;

SELECT brain_protect_table(
    'documents',
    'tenant_id = brain_current_tenant() '
    'AND brain_key_may_see(labels, namespace, user_id, session_id)');
SELECT brain_protect_table(
    'document_chunks',
    'tenant_id = brain_current_tenant() '
    'AND brain_key_may_see(labels, namespace, user_id, session_id)');
GRANT SELECT, INSERT, UPDATE ON documents, document_chunks TO brain_app;

-- Audit: every committed change to documents is logged by triggers, like memories (0003),
-- as "<tenant> <document id> <change>" notes flushed into one event at commit. Chunks
-- change only with their document, so its event covers them.
CREATE FUNCTION brain_audit_note_document_inserts() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_lines text;
BEGIN
    SELECT string_agg(n.tenant_id::text || ' ' || n.document_id::text || ' document.' || n.change || E'\n', '')
    INTO v_lines
    FROM new_rows n;
    IF v_lines IS NOT NULL THEN
        PERFORM brain_audit_note(v_lines);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION brain_audit_note_document_updates() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_lines text;
BEGIN
    SELECT string_agg(x.tenant_id::text || ' ' || x.document_id::text || ' ' || x.label || E'\n', '')
    INTO v_lines
    FROM (
        SELECT n.tenant_id, n.document_id,
               CASE
                   WHEN n.content = '' AND o.content <> '' THEN 'document.erase'
                   WHEN n.labels IS DISTINCT FROM o.labels THEN 'document.relabel'
                   -- retiring a version goes with inserting its successor
                   ELSE ''
               END AS label
        FROM old_rows o
        JOIN new_rows n ON n.tenant_id = o.tenant_id AND n.document_id = o.document_id
                       AND n.version = o.version
    ) x;
    IF v_lines IS NOT NULL THEN
        PERFORM brain_audit_note(v_lines);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER documents_audit_note_inserts AFTER INSERT ON documents
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION brain_audit_note_document_inserts();
CREATE TRIGGER documents_audit_note_updates AFTER UPDATE ON documents
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION brain_audit_note_document_updates();
-- The flush is generic: it appends this transaction's notes for the row's tenant.
CREATE CONSTRAINT TRIGGER documents_audit_flush AFTER INSERT OR UPDATE ON documents
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION brain_audit_flush_memories();
