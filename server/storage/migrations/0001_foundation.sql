-- Foundation schema: tenants, API keys, memory versions, with row-level security.
-- Runs as the owner role. The server connects as a member of brain_app, which
-- owns nothing, cannot bypass RLS, and sees one tenant per transaction through
-- the transaction-local setting brain.tenant_id.

CREATE EXTENSION IF NOT EXISTS vector;

CREATE FUNCTION brain_current_tenant() RETURNS uuid
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT NULLIF(current_setting('brain.tenant_id', true), '')::uuid $$;

CREATE TABLE tenants (
    tenant_id   uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    tenant_id          uuid NOT NULL REFERENCES tenants (tenant_id),
    key_id             text NOT NULL,
    secret_hash        bytea NOT NULL,
    principal          text NOT NULL CHECK (principal <> ''),
    permissions        text[] NOT NULL,
    confine_user_id    text,
    confine_namespaces text[] NOT NULL DEFAULT '{}',
    confine_session_id text,
    labels             text[] NOT NULL CHECK (cardinality(labels) >= 1 AND array_position(labels, NULL) IS NULL),
    description        text NOT NULL DEFAULT '',
    created_at         timestamptz NOT NULL DEFAULT now(),
    expires_at         timestamptz,
    revoked_at         timestamptz,
    last_used_at       timestamptz,
    rotated_from       text,
    PRIMARY KEY (tenant_id, key_id)
);
-- Keys are looked up by their public id before the tenant is known.
CREATE INDEX api_keys_key_id ON api_keys (key_id);

CREATE TABLE memories (
    tenant_id            uuid NOT NULL REFERENCES tenants (tenant_id),
    memory_id            uuid NOT NULL,
    version              integer NOT NULL CHECK (version >= 1),
    namespace            text NOT NULL CHECK (namespace <> ''),
    user_id              text NOT NULL DEFAULT '',
    session_id           text NOT NULL DEFAULT '',
    content              text NOT NULL,
    fingerprint          bytea,
    kind                 text NOT NULL DEFAULT 'note',
    tags                 text[] NOT NULL DEFAULT '{}',
    metadata             jsonb NOT NULL DEFAULT '{}',
    labels               text[] NOT NULL CHECK (cardinality(labels) >= 1 AND array_position(labels, NULL) IS NULL),
    status               text NOT NULL CHECK (status IN ('active', 'candidate', 'superseded', 'retracted', 'rejected', 'withdrawn')),
    confidence           real NOT NULL DEFAULT 1 CHECK (confidence BETWEEN 0 AND 1),
    importance           real NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    valid_from           timestamptz NOT NULL,
    valid_to             timestamptz,
    recorded_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    retired_at           timestamptz,
    expires_at           timestamptz,
    created_by           text NOT NULL,
    changed_by           text NOT NULL,
    changed_by_key       text NOT NULL,
    change               text NOT NULL,
    reviewed_by          text,
    reviewed_at          timestamptz,
    review_reason        text,
    proposal_reason      text,
    candidate_expires_at timestamptz,
    supersedes           uuid[] NOT NULL DEFAULT '{}',
    superseded_by        uuid[] NOT NULL DEFAULT '{}',
    embedding            vector,
    embedding_model      text,
    search_tsv           tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
    PRIMARY KEY (tenant_id, memory_id, version),
    CHECK (valid_to IS NULL OR valid_from <= valid_to),
    CHECK (retired_at IS NULL OR recorded_at <= retired_at)
);
-- One current version per memory.
CREATE UNIQUE INDEX memories_current ON memories (tenant_id, memory_id) WHERE retired_at IS NULL;
CREATE INDEX memories_bucket ON memories (tenant_id, namespace, user_id, session_id, status) WHERE retired_at IS NULL;
CREATE INDEX memories_tsv ON memories USING gin (search_tsv);
CREATE INDEX memories_fingerprint ON memories (tenant_id, namespace, user_id, session_id, fingerprint) WHERE retired_at IS NULL;

-- The calling key's confinement and labels, set per transaction by the server.
-- Row-level security re-checks them on every row, as a second wall behind the
-- visibility predicate the application puts in each statement.
CREATE FUNCTION brain_key_confines(p_namespace text, p_user_id text, p_session_id text)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT (COALESCE(current_setting('brain.confine_user_id', true), '') = ''
            OR p_user_id IN ('', current_setting('brain.confine_user_id', true)))
       AND CASE WHEN COALESCE(current_setting('brain.confine_namespaces', true), '') = ''
                THEN true
                ELSE p_namespace = ANY (current_setting('brain.confine_namespaces', true)::text[])
           END
       AND (COALESCE(current_setting('brain.confine_session_id', true), '') = ''
            OR p_session_id IN ('', current_setting('brain.confine_session_id', true)))
$$;

CREATE FUNCTION brain_key_may_see(
    p_labels text[], p_namespace text, p_user_id text, p_session_id text
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT p_labels && COALESCE(NULLIF(current_setting('brain.labels', true), ''), '{}')::text[]
       AND brain_key_confines(p_namespace, p_user_id, p_session_id)
$$;

-- Row-level security: forced on every tenant table. The app role sees one tenant (and
-- whatever else a table's policy adds); the owner (migrations, brain-admin) sees all
-- through its own policy. Every later migration protects its tables with this function.
CREATE FUNCTION brain_protect_table(
    p_table regclass, p_app_policy text DEFAULT 'tenant_id = brain_current_tenant()'
) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', p_table);
    EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', p_table);
    EXECUTE format('CREATE POLICY tenant_isolation ON %s TO brain_app USING (%s) WITH CHECK (%s)',
                   p_table, p_app_policy, p_app_policy);
    EXECUTE format('CREATE POLICY owner_all ON %s TO %I USING (true) WITH CHECK (true)',
                   p_table, current_user);
END
$$;
REVOKE ALL ON FUNCTION brain_protect_table(regclass, text) FROM PUBLIC;

SELECT brain_protect_table('tenants');
SELECT brain_protect_table('api_keys');
SELECT brain_protect_table(
    'memories',
    'tenant_id = brain_current_tenant() '
    'AND brain_key_may_see(labels, namespace, user_id, session_id)');

-- No grant on api_keys: the app role reaches keys only through brain_lookup_key, so
-- even its own tenant's key hashes cannot be listed with SQL.
GRANT SELECT ON tenants TO brain_app;
GRANT SELECT, INSERT, UPDATE ON memories TO brain_app;

-- Authentication happens before the tenant is known: the app role may look up
-- exactly one key by its public id, through this definer function, and nothing else.
CREATE FUNCTION brain_lookup_key(p_key_id text)
RETURNS TABLE (
    tenant_id uuid, tenant_name text, key_id text, secret_hash bytea, principal text,
    permissions text[], confine_user_id text, confine_namespaces text[],
    confine_session_id text, labels text[], expires_at timestamptz, revoked_at timestamptz
)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
    SELECT k.tenant_id, t.name, k.key_id, k.secret_hash, k.principal, k.permissions,
           k.confine_user_id, k.confine_namespaces, k.confine_session_id, k.labels,
           k.expires_at, k.revoked_at
    FROM api_keys k JOIN tenants t USING (tenant_id)
    WHERE k.key_id = p_key_id
$$;

-- Coarse last-used time: written at most once a minute per key.
CREATE FUNCTION brain_touch_key(p_key_id text) RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
    UPDATE api_keys SET last_used_at = date_trunc('minute', now())
    WHERE key_id = p_key_id
      AND (last_used_at IS NULL OR last_used_at < date_trunc('minute', now()))
$$;

REVOKE ALL ON FUNCTION brain_lookup_key(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION brain_touch_key(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_lookup_key(text) TO brain_app;
GRANT EXECUTE ON FUNCTION brain_touch_key(text) TO brain_app;
