-- Document tombstones (issue 31): a deleted document's content cannot be put back in the
-- same collection unnoticed. Deleting a document leaves, for each distinct content of its
-- versions, a keyed fingerprint (HMAC under the server's pepper, as memory tombstones;
-- never the text, the path or a plain hash) in its bucket and collection. A later put of
-- that content there is FAILED_PRECONDITION naming the tombstone, unless the put says
-- readmit_tombstoned, which lifts it.
--
-- A tombstone is a side record of its document and is visible exactly when the document
-- is: it carries the document's scope and labels (a deleted document's never change), so
-- the one visibility predicate and row-level security apply to it directly. It binds only
-- callers who could see the document: to any other the content was never there.

CREATE TABLE document_tombstones (
    tenant_id     uuid NOT NULL REFERENCES tenants (tenant_id),
    tombstone_id  uuid NOT NULL,
    namespace     text NOT NULL,
    user_id       text NOT NULL,
    session_id    text NOT NULL,
    collection    text NOT NULL,
    labels        text[] NOT NULL CHECK (cardinality(labels) >= 1 AND array_position(labels, NULL) IS NULL),
    fingerprint   bytea NOT NULL,
    document_id   uuid NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    created_by    text NOT NULL,
    readmitted_at timestamptz,
    readmitted_by text,
    PRIMARY KEY (tenant_id, tombstone_id)
);
-- One live tombstone per document and content (deleting is final, so one per document).
CREATE UNIQUE INDEX document_tombstones_live
    ON document_tombstones (tenant_id, namespace, user_id, session_id, collection, fingerprint, document_id)
    WHERE readmitted_at IS NULL;
CREATE INDEX document_tombstones_document ON document_tombstones (tenant_id, document_id);

SELECT brain_protect_table(
    'document_tombstones',
    'tenant_id = brain_current_tenant() '
    'AND brain_key_may_see(labels, namespace, user_id, session_id)');
GRANT SELECT, INSERT, UPDATE ON document_tombstones TO brain_app;
