-- Conflicts between memories, and what forgetting does to what a memory replaced (issue 30).
--
-- A conflict is a side record of the two memories it joins: visible exactly when both are
-- (the head rule of migration 0005), erased when either is forgotten. It holds ids,
-- scores and a short detail of the values that changed (so a forget deletes the row).
-- A detected conflict never changes a memory: it waits OPEN for a reviewer, who supersedes
-- the older memory by the newer (resolved) or lets both stand (dismissed, and the pair is
-- never proposed again: one row per ordered pair).

CREATE TABLE memory_conflicts (
    tenant_id      uuid NOT NULL REFERENCES tenants (tenant_id),
    conflict_id    uuid NOT NULL,
    namespace      text NOT NULL,
    newer_id       uuid NOT NULL,
    older_id       uuid NOT NULL,
    rule           text NOT NULL
                   CHECK (rule IN ('value_update', 'correction', 'slot', 'restatement')),
    state          text NOT NULL DEFAULT 'open'
                   CHECK (state IN ('open', 'resolved', 'dismissed', 'applied')),
    overlap        real NOT NULL,
    semantic       real NOT NULL DEFAULT 0,
    detail         text NOT NULL DEFAULT '',
    judge          text NOT NULL DEFAULT '',
    detected_by    text NOT NULL,
    detected_at    timestamptz NOT NULL,
    resolved_by    text,
    resolved_at    timestamptz,
    resolve_reason text,
    PRIMARY KEY (tenant_id, conflict_id),
    UNIQUE (tenant_id, older_id, newer_id),
    CHECK (newer_id <> older_id)
);
CREATE INDEX memory_conflicts_newer ON memory_conflicts (tenant_id, newer_id);
CREATE INDEX memory_conflicts_older ON memory_conflicts (tenant_id, older_id);
CREATE INDEX memory_conflicts_open ON memory_conflicts (tenant_id, namespace, conflict_id)
    WHERE state = 'open';

SELECT brain_protect_table(
    'memory_conflicts',
    'tenant_id = brain_current_tenant() AND brain_key_may_see_head(tenant_id, newer_id) '
    'AND brain_key_may_see_head(tenant_id, older_id)');
GRANT SELECT, INSERT, UPDATE, DELETE ON memory_conflicts TO brain_app;

-- What a write does with the conflicts it finds in a namespace: 'propose' (the default)
-- records them for review, 'off' does not look, 'supersede_own' lets the writer's own
-- supersede happen at once when it could have superseded by hand (same user, session and
-- labels; never across them).
ALTER TABLE namespace_policies
    ADD COLUMN conflicts text NOT NULL DEFAULT 'propose'
    CHECK (conflicts IN ('off', 'propose', 'supersede_own'));

-- Forgetting a memory that superseded others reopens each of them as a candidate for
-- review, never silently as ACTIVE. Definer rights: the forgetting key may not see a
-- memory it never could (a supersede needs only that the new memory reaches the old
-- one's readers, not the reverse), and leaving it superseded by erased text would lose it.
-- The reopened version keeps its scope, labels and author; only the caller's tenant.
CREATE FUNCTION brain_reopen_superseded(
    p_forgotten uuid, p_at timestamptz, p_by text, p_key text, p_ttl interval
) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_tenant uuid := brain_current_tenant();
    v_old record;
    v_count integer := 0;
BEGIN
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'brain_reopen_superseded: no tenant in this transaction';
    END IF;
    FOR v_old IN
        SELECT o.memory_id, o.version FROM memories o
        WHERE o.tenant_id = v_tenant AND o.retired_at IS NULL AND o.status = 'superseded'
          AND p_forgotten = ANY (o.superseded_by)
        ORDER BY o.memory_id
        FOR UPDATE
    LOOP
        UPDATE memories SET retired_at = p_at
        WHERE tenant_id = v_tenant AND memory_id = v_old.memory_id
          AND version = v_old.version;
        INSERT INTO memories (
            tenant_id, memory_id, version, namespace, user_id, session_id, content,
            fingerprint, kind, tags, metadata, labels, status, confidence, importance,
            valid_from, valid_to, recorded_at, retired_at, expires_at, created_by,
            changed_by, changed_by_key, change, reviewed_by, reviewed_at, review_reason,
            proposal_reason, candidate_expires_at, supersedes, superseded_by, embedding,
            embedding_model)
        SELECT tenant_id, memory_id, version + 1, namespace, user_id, session_id, content,
               fingerprint, kind, tags, metadata, labels, 'candidate', confidence,
               importance, valid_from, valid_to, p_at, NULL, expires_at, created_by,
               p_by, p_key, 'reopen', NULL, NULL, NULL,
               'reopened for review: the memory that superseded it was forgotten',
               p_at + p_ttl, supersedes, array_remove(superseded_by, p_forgotten),
               embedding, embedding_model
        FROM memories
        WHERE tenant_id = v_tenant AND memory_id = v_old.memory_id
          AND version = v_old.version;
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;
REVOKE ALL ON FUNCTION brain_reopen_superseded(uuid, timestamptz, text, text, interval)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_reopen_superseded(uuid, timestamptz, text, text, interval)
    TO brain_app;
