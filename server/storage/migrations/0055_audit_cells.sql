-- Audit reads walk only what the caller may see (issue 32).
--
-- A confined key's audit page, and every Watch replay, used to read the tenant's log from
-- its cursor and drop the events it may not see, so the work (and so the latency) of a call
-- grew with the hidden events after the cursor: a key timing such calls could count them.
-- Now every event is also filed under the visibility cell of each object it names, and a
-- read walks the cells it may see, each from its cursor on an index, never a hidden row.
--
-- A cell is a set of objects every caller sees all or nothing of: one tenant, namespace,
-- user, session and label set, plus, for a memory that was never admitted (its head a
-- candidate, or a rejected or withdrawn proposal), its proposer. An object's cell is the one
-- its current version (its head) belongs to, as the visibility predicate reads it, so a
-- relabel, an approval or a forget moves its earlier events with it. Every change of a
-- memory or document row appends an event naming it, so the append is where an object's
-- filing is brought up to date. Events that name no object (keys, tenants, policies) are
-- filed in the tenant's 'tenant' cell; an object with no current version (a deleted
-- document) in its 'unreadable' cell, which no key's predicate admits.
--
-- What is left: a read still looks at the directory of cells (a few rows per bucket and
-- label set, never per event), and index descents grow with the logarithm of the whole
-- index (every tenant's events); see docs/concepts/keys-and-scope.md.

CREATE TABLE audit_cells (
    tenant_id  uuid NOT NULL REFERENCES tenants (tenant_id),
    cell_id    bigint GENERATED ALWAYS AS IDENTITY,
    kind       text NOT NULL CHECK (kind IN ('object', 'tenant', 'unreadable')),
    namespace  text NOT NULL,
    user_id    text NOT NULL,
    session_id text NOT NULL,
    labels     text[] NOT NULL,  -- sorted, distinct
    proposer   text NOT NULL,    -- '' unless the objects are proposals never admitted
    PRIMARY KEY (tenant_id, cell_id),
    UNIQUE (tenant_id, kind, namespace, user_id, session_id, labels, proposer)
);

-- One row per (event, object named): the nil uuid for an event that names none.
CREATE TABLE audit_cell_events (
    tenant_id uuid NOT NULL,
    cell_id   bigint NOT NULL,
    seq       bigint NOT NULL,
    object_id uuid NOT NULL,
    PRIMARY KEY (tenant_id, cell_id, seq, object_id),
    FOREIGN KEY (tenant_id, cell_id) REFERENCES audit_cells (tenant_id, cell_id)
);
-- Moving an object's events to its new cell, and one object's events within its cell.
CREATE INDEX audit_cell_events_object ON audit_cell_events (tenant_id, object_id, cell_id, seq);

-- A cell is visible as its objects are (the rule of brain_key_may_see and
-- brain_key_may_see_proposal); tenant events as audit_events are (the server shows them
-- only to keys confined to nothing); the unreadable cell to no key.
SELECT brain_protect_table(
    'audit_cells',
    'tenant_id = brain_current_tenant() AND (kind = ''tenant'' OR (kind = ''object'' '
    'AND brain_key_may_see(labels, namespace, user_id, session_id) '
    'AND (proposer = '''' OR brain_key_may_see_proposal(''candidate'', proposer))))');
-- A filing row is visible exactly when its cell is (the subquery is itself under RLS).
SELECT brain_protect_table(
    'audit_cell_events',
    'tenant_id = brain_current_tenant() AND EXISTS (SELECT 1 FROM audit_cells c '
    'WHERE c.tenant_id = audit_cell_events.tenant_id '
    'AND c.cell_id = audit_cell_events.cell_id)');
REVOKE ALL ON audit_cells, audit_cell_events FROM PUBLIC;
GRANT SELECT ON audit_cells, audit_cell_events TO brain_app;

-- A lookup of one event by its key must not be able to take the principal index instead
-- (PostgreSQL 18 can skip through an index's leading columns, here through every principal
-- of the tenant, whose number would then show in the work). Partial on a condition every
-- row meets, it serves only a statement that names the condition: a filter by principal.
DROP INDEX audit_events_principal;
CREATE INDEX audit_events_principal ON audit_events (tenant_id, principal, seq)
    WHERE principal <> '';

-- The cell an object belongs to now (NULL: the tenant's cell for events naming nothing).
CREATE FUNCTION brain_audit_cell(p_tenant uuid, p_object uuid) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_kind text := 'unreadable';
    v_namespace text := '';
    v_user text := '';
    v_session text := '';
    v_labels text[] := '{}';
    v_proposer text := '';
    v_cell bigint;
BEGIN
    IF p_object IS NULL THEN
        v_kind := 'tenant';
    ELSE
        SELECT 'object', m.namespace, m.user_id, m.session_id,
               ARRAY(SELECT DISTINCT l FROM unnest(m.labels) l ORDER BY l),
               CASE WHEN m.status IN ('candidate', 'rejected', 'withdrawn')
                    THEN m.created_by ELSE '' END
        INTO v_kind, v_namespace, v_user, v_session, v_labels, v_proposer
        FROM memories m
        WHERE m.tenant_id = p_tenant AND m.memory_id = p_object AND m.retired_at IS NULL;
        IF NOT FOUND THEN
            SELECT 'object', d.namespace, d.user_id, d.session_id,
                   ARRAY(SELECT DISTINCT l FROM unnest(d.labels) l ORDER BY l), ''
            INTO v_kind, v_namespace, v_user, v_session, v_labels, v_proposer
            FROM documents d
            WHERE d.tenant_id = p_tenant AND d.document_id = p_object
              AND d.retired_at IS NULL;
            IF NOT FOUND THEN
                v_kind := 'unreadable';
                v_namespace := ''; v_user := ''; v_session := ''; v_labels := '{}';
                v_proposer := '';
            END IF;
        END IF;
    END IF;
    SELECT c.cell_id INTO v_cell FROM audit_cells c
    WHERE c.tenant_id = p_tenant AND c.kind = v_kind AND c.namespace = v_namespace
      AND c.user_id = v_user AND c.session_id = v_session AND c.labels = v_labels
      AND c.proposer = v_proposer;
    IF v_cell IS NULL THEN
        -- Appends are serialised per tenant by the head lock, so no one races this insert.
        INSERT INTO audit_cells (tenant_id, kind, namespace, user_id, session_id, labels,
                                 proposer)
        VALUES (p_tenant, v_kind, v_namespace, v_user, v_session, v_labels, v_proposer)
        RETURNING cell_id INTO v_cell;
    END IF;
    RETURN v_cell;
END
$$;
REVOKE ALL ON FUNCTION brain_audit_cell(uuid, uuid) FROM PUBLIC;

-- File one event under the cells of what it names, moving each object's earlier events to
-- its cell of now.
CREATE FUNCTION brain_audit_file(p_tenant uuid, p_seq bigint, p_object_ids uuid[])
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_id uuid;
    v_cell bigint;
BEGIN
    IF cardinality(p_object_ids) = 0 THEN
        INSERT INTO audit_cell_events (tenant_id, cell_id, seq, object_id)
        VALUES (p_tenant, brain_audit_cell(p_tenant, NULL), p_seq,
                '00000000-0000-0000-0000-000000000000')
        ON CONFLICT DO NOTHING;
        RETURN;
    END IF;
    FOR v_id IN SELECT DISTINCT u FROM unnest(p_object_ids) u ORDER BY u LOOP
        v_cell := brain_audit_cell(p_tenant, v_id);
        UPDATE audit_cell_events SET cell_id = v_cell
        WHERE tenant_id = p_tenant AND object_id = v_id AND cell_id <> v_cell;
        INSERT INTO audit_cell_events (tenant_id, cell_id, seq, object_id)
        VALUES (p_tenant, v_cell, p_seq, v_id)
        ON CONFLICT DO NOTHING;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION brain_audit_file(uuid, bigint, uuid[]) FROM PUBLIC;

-- The append of 0033, filing the event it appends.
CREATE OR REPLACE FUNCTION brain_audit_append(
    p_tenant uuid, p_key_id text, p_principal text, p_method text,
    p_memory_ids uuid[], p_outcome text
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_prev bytea;
    v_seq bigint;
    v_at timestamptz;
    v_hash bytea;
BEGIN
    SELECT seq, hash INTO v_seq, v_prev FROM audit_heads WHERE tenant_id = p_tenant FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO audit_heads (tenant_id, seq, hash)
        VALUES (p_tenant, 0, decode(repeat('00', 32), 'hex'))
        ON CONFLICT (tenant_id) DO NOTHING;
        SELECT seq, hash INTO v_seq, v_prev FROM audit_heads WHERE tenant_id = p_tenant FOR UPDATE;
    END IF;
    v_seq := v_seq + 1;
    -- Taken under the head lock, so time never runs backwards along a chain.
    v_at := clock_timestamp();
    v_hash := sha256(v_prev || brain_audit_canonical(
        p_tenant, v_seq, v_at, p_key_id, p_principal, p_method, p_memory_ids, p_outcome));
    INSERT INTO audit_events (tenant_id, seq, at, key_id, principal, method, memory_ids,
                              outcome, prev_hash, hash)
    VALUES (p_tenant, v_seq, v_at, p_key_id, p_principal, p_method, p_memory_ids,
            p_outcome, v_prev, v_hash);
    UPDATE audit_heads SET seq = v_seq, hash = v_hash WHERE tenant_id = p_tenant;
    PERFORM brain_audit_file(p_tenant, v_seq, p_memory_ids);
    RETURN v_seq;
END
$$;

-- File a tenant's whole log again from its objects as they are now (this migration, and a
-- restore, which does not carry the filing: it is derived, like BM25's statistics).
CREATE FUNCTION brain_rebuild_audit_cells(p_tenant uuid) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    DELETE FROM audit_cell_events WHERE tenant_id = p_tenant;
    INSERT INTO audit_cell_events (tenant_id, cell_id, seq, object_id)
    SELECT p_tenant, o.cell_id, e.seq, o.object_id
    FROM (SELECT x.object_id, brain_audit_cell(p_tenant, x.object_id) AS cell_id
          FROM (SELECT DISTINCT u AS object_id
                FROM audit_events e2 CROSS JOIN LATERAL unnest(e2.memory_ids) u
                WHERE e2.tenant_id = p_tenant) x) o
    JOIN audit_events e ON e.tenant_id = p_tenant AND e.memory_ids @> ARRAY[o.object_id]
    ON CONFLICT DO NOTHING;
    INSERT INTO audit_cell_events (tenant_id, cell_id, seq, object_id)
    SELECT p_tenant, brain_audit_cell(p_tenant, NULL), e.seq,
           '00000000-0000-0000-0000-000000000000'
    FROM audit_events e
    WHERE e.tenant_id = p_tenant AND cardinality(e.memory_ids) = 0
    ON CONFLICT DO NOTHING;
END
$$;
REVOKE ALL ON FUNCTION brain_rebuild_audit_cells(uuid) FROM PUBLIC;

SELECT brain_rebuild_audit_cells(tenant_id) FROM tenants;
