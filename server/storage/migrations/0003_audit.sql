-- Tamper-evident audit log: one hash chain per tenant, written by triggers.
--
-- Every committed write to memories, api_keys and tenants appends an event inside the
-- writing transaction, so no write path can forget to log. The actor comes from the
-- transaction-local settings brain.key_id / brain.principal / brain.method that
-- tenant_tx sets (brain-admin sets brain.principal = 'admin:<os user>').
--
--   hash = sha256(prev_hash || brain_audit_canonical(event)),  prev_hash of seq 1 = 32 zero bytes
--
-- Writes to memories are collected per transaction and logged as ONE event at commit
-- (a deferred constraint trigger), so a save that supersedes two memories is one event
-- naming three ids, and the per-tenant head lock is held only for the commit itself.
-- Events never hold memory content: it must survive erasure.

CREATE TABLE audit_events (
    tenant_id   uuid NOT NULL REFERENCES tenants (tenant_id),
    seq         bigint NOT NULL CHECK (seq >= 1),
    at          timestamptz NOT NULL,
    key_id      text NOT NULL,
    principal   text NOT NULL,
    method      text NOT NULL,
    memory_ids  uuid[] NOT NULL DEFAULT '{}',
    outcome     text NOT NULL,
    prev_hash   bytea NOT NULL CHECK (octet_length(prev_hash) = 32),
    hash        bytea NOT NULL CHECK (octet_length(hash) = 32),
    PRIMARY KEY (tenant_id, seq)
);
CREATE INDEX audit_events_memory_ids ON audit_events USING gin (memory_ids);
CREATE INDEX audit_events_principal ON audit_events (tenant_id, principal, seq);

-- The last event of each tenant. Appending locks this row FOR UPDATE, which
-- serialises concurrent writers of one tenant into an unbroken, gapless chain.
CREATE TABLE audit_heads (
    tenant_id uuid PRIMARY KEY REFERENCES tenants (tenant_id),
    seq       bigint NOT NULL,
    hash      bytea NOT NULL
);
INSERT INTO audit_heads (tenant_id, seq, hash)
SELECT tenant_id, 0, decode(repeat('00', 32), 'hex') FROM tenants;

SELECT brain_protect_table('audit_events');
SELECT brain_protect_table('audit_heads');

-- The app reads its tenant's events; it never writes them itself (the definer
-- functions below do). Nobody but the owner may UPDATE or DELETE.
REVOKE ALL ON audit_events, audit_heads FROM PUBLIC;
GRANT SELECT ON audit_events TO brain_app;

-- Append-only, even for the owner: changing history needs a deliberate
-- ALTER TABLE ... DISABLE TRIGGER, and `brain-admin audit verify` still sees it.
CREATE FUNCTION brain_audit_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION brain_audit_refuse_change();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION brain_audit_refuse_change();

-- The bytes an event's hash covers: netstring-style "<len>:<utf8 bytes>;" per field,
-- so no field value can shift a boundary. Mirrored by brain.server.audit.canonical.
CREATE FUNCTION brain_audit_canonical(
    p_tenant uuid, p_seq bigint, p_at timestamptz, p_key_id text, p_principal text,
    p_method text, p_memory_ids uuid[], p_outcome text
) RETURNS bytea
LANGUAGE sql STABLE SET search_path = pg_catalog
AS $$
    SELECT string_agg(
               convert_to(octet_length(convert_to(f, 'UTF8'))::text || ':', 'UTF8')
               || convert_to(f, 'UTF8') || '\x3b'::bytea,
               ''::bytea ORDER BY i)
    FROM unnest(ARRAY[
        'brain-audit/1',
        p_tenant::text,
        p_seq::text,
        to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        p_key_id,
        p_principal,
        p_method,
        array_to_string(p_memory_ids, ','),
        p_outcome
    ]) WITH ORDINALITY AS t (f, i)
$$;

-- The acting principal: the request's, else brain-admin's, else the database role.
CREATE FUNCTION brain_audit_principal() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog
AS $$
    SELECT COALESCE(NULLIF(current_setting('brain.principal', true), ''), 'db:' || session_user)
$$;

-- Append one event to the tenant's chain and wake watchers (delivered at commit).
CREATE FUNCTION brain_audit_append(
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
    PERFORM pg_notify('brain_audit', p_tenant::text || ':' || v_seq::text);
    RETURN v_seq;
END
$$;

-- Append lines to this transaction's pending audit notes (flushed at commit).
CREATE FUNCTION brain_audit_note(p_lines text) RETURNS void
LANGUAGE sql
AS $$
    SELECT set_config(
        'brain.audit_pending',
        COALESCE(current_setting('brain.audit_pending', true), '') || p_lines,
        true)
$$;

-- Per statement: remember "<tenant> <memory id> <change>" lines in a transaction-local
-- setting (set-based over the transition tables, so bulk statements stay linear).
-- Updates that only fill in an embedding are not changes anyone acted on.
CREATE FUNCTION brain_audit_note_inserts() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_lines text;
BEGIN
    SELECT string_agg(n.tenant_id::text || ' ' || n.memory_id::text || ' ' || n.change || E'\n', '')
    INTO v_lines
    FROM new_rows n;
    IF v_lines IS NOT NULL THEN
        PERFORM brain_audit_note(v_lines);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION brain_audit_note_updates() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_lines text;
BEGIN
    SELECT string_agg(x.tenant_id::text || ' ' || x.memory_id::text || ' ' || x.label || E'\n', '')
    INTO v_lines
    FROM (
        SELECT n.tenant_id, n.memory_id,
               CASE
                   WHEN j.vo = j.vn THEN NULL
                   WHEN n.content = '' AND o.content <> '' THEN 'erase'
                   -- retiring a version goes with inserting its successor
                   WHEN j.vo - 'retired_at' = j.vn - 'retired_at' THEN ''
                   ELSE 'amend'
               END AS label
        FROM old_rows o
        JOIN new_rows n ON n.tenant_id = o.tenant_id AND n.memory_id = o.memory_id
                       AND n.version = o.version
        CROSS JOIN LATERAL (
            SELECT to_jsonb(o) - ARRAY['embedding', 'embedding_model', 'search_tsv'] AS vo,
                   to_jsonb(n) - ARRAY['embedding', 'embedding_model', 'search_tsv'] AS vn
        ) j
    ) x
    WHERE x.label IS NOT NULL;
    IF v_lines IS NOT NULL THEN
        PERFORM brain_audit_note(v_lines);
    END IF;
    RETURN NULL;
END
$$;

-- At commit: one event per tenant for everything noted in this transaction.
CREATE FUNCTION brain_audit_flush_memories() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_pending text := COALESCE(current_setting('brain.audit_pending', true), '');
    v_ids uuid[];
    v_outcome text;
    v_rest text;
BEGIN
    IF v_pending = '' THEN
        RETURN NULL;
    END IF;
    WITH lines AS (
        SELECT l, i,
               split_part(l, ' ', 1) = NEW.tenant_id::text AS mine,
               split_part(l, ' ', 2) AS memory_id,
               split_part(l, ' ', 3) AS label
        FROM unnest(string_to_array(rtrim(v_pending, E'\n'), E'\n')) WITH ORDINALITY AS t (l, i)
    )
    SELECT
        (SELECT array_agg(memory_id::uuid ORDER BY first)
         FROM (SELECT memory_id, min(i) AS first FROM lines WHERE mine GROUP BY memory_id) x),
        (SELECT string_agg(label, ',' ORDER BY first)
         FROM (SELECT label, min(i) AS first FROM lines WHERE mine AND label <> ''
               GROUP BY label) y),
        (SELECT string_agg(l || E'\n', '' ORDER BY i) FROM lines WHERE NOT mine)
    INTO v_ids, v_outcome, v_rest;
    IF v_ids IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('brain.audit_pending', COALESCE(v_rest, ''), true);
    PERFORM brain_audit_append(
        NEW.tenant_id,
        COALESCE(current_setting('brain.key_id', true), ''),
        brain_audit_principal(),
        COALESCE(NULLIF(current_setting('brain.method', true), ''), 'sql'),
        v_ids,
        COALESCE(v_outcome, 'amend'));
    RETURN NULL;
END
$$;

CREATE TRIGGER memories_audit_note_inserts AFTER INSERT ON memories
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION brain_audit_note_inserts();
CREATE TRIGGER memories_audit_note_updates AFTER UPDATE ON memories
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION brain_audit_note_updates();
CREATE CONSTRAINT TRIGGER memories_audit_flush AFTER INSERT OR UPDATE ON memories
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION brain_audit_flush_memories();

-- Tenant, key and namespace-policy events come from brain-admin (the owner role).
CREATE FUNCTION brain_audit_key_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM brain_audit_append(
            NEW.tenant_id, NEW.key_id, brain_audit_principal(),
            CASE WHEN NEW.rotated_from IS NULL THEN 'admin.keys.create'
                 ELSE 'admin.keys.rotate' END,
            '{}', CASE WHEN NEW.rotated_from IS NULL THEN 'created'
                       ELSE 'created; replaces ' || NEW.rotated_from END);
    ELSE
        PERFORM brain_audit_append(
            NEW.tenant_id, NEW.key_id, brain_audit_principal(), 'admin.keys.revoke', '{}',
            CASE WHEN NEW.revoked_at IS NULL THEN 'unrevoked'
                 ELSE 'revoked at ' || to_char(NEW.revoked_at AT TIME ZONE 'UTC',
                                               'YYYY-MM-DD"T"HH24:MI:SS"Z"') END);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION brain_audit_tenant_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    PERFORM brain_audit_append(
        NEW.tenant_id, '', brain_audit_principal(), 'admin.tenants.create', '{}', 'created');
    RETURN NULL;
END
$$;

-- Namespace review policy (brain-admin namespaces set) decides who may write directly.
CREATE FUNCTION brain_audit_namespace_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
BEGIN
    PERFORM brain_audit_append(
        NEW.tenant_id, '', brain_audit_principal(), 'admin.namespaces.set', '{}',
        format('namespace %s: review_required=%s candidate_ttl=%s max_pending=%s',
               NEW.namespace, NEW.review_required::text, NEW.candidate_ttl, NEW.max_pending));
    RETURN NULL;
END
$$;

CREATE TRIGGER namespace_policies_audit AFTER INSERT OR UPDATE ON namespace_policies
    FOR EACH ROW EXECUTE FUNCTION brain_audit_namespace_event();
CREATE TRIGGER api_keys_audit_insert AFTER INSERT ON api_keys
    FOR EACH ROW EXECUTE FUNCTION brain_audit_key_event();
-- Only revocation is an event; last_used_at touches are not.
CREATE TRIGGER api_keys_audit_revoke AFTER UPDATE OF revoked_at ON api_keys
    FOR EACH ROW WHEN (OLD.revoked_at IS DISTINCT FROM NEW.revoked_at)
    EXECUTE FUNCTION brain_audit_key_event();
CREATE TRIGGER tenants_audit_insert AFTER INSERT ON tenants
    FOR EACH ROW EXECUTE FUNCTION brain_audit_tenant_event();

REVOKE ALL ON FUNCTION brain_audit_append(uuid, text, text, text, uuid[], text) FROM PUBLIC;
REVOKE ALL ON FUNCTION brain_audit_flush_memories() FROM PUBLIC;
REVOKE ALL ON FUNCTION brain_audit_key_event() FROM PUBLIC;
REVOKE ALL ON FUNCTION brain_audit_tenant_event() FROM PUBLIC;
REVOKE ALL ON FUNCTION brain_audit_namespace_event() FROM PUBLIC;
