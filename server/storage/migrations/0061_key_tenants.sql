-- Which tenant holds a key, so authenticating a request does not ask every shard (issue 29).
--
-- A key is looked up by its public id before the tenant is known (brain_lookup_key, and
-- brain_touch_key for its last use). On a Citus cluster api_keys is distributed by
-- tenant_id, so that lookup read all 32 of its shards on every request (34 ms of a 36 ms
-- get on the lab cluster, deploy/SCALING.md). api_key_tenants maps each key id to its
-- tenant: a reference table there (a copy on every node, read locally on the
-- coordinator), after which the key's own row is read from its tenant's one shard.
--
-- It is only a routing hint, never an authority: brain_lookup_key still reads the key's
-- row in api_keys (secret hash, permissions, expiry, revocation), so a key revoked,
-- expired or absent there does not authenticate whatever this table says. The foreign key
-- from api_keys makes every key's row name its tenant here (admin.mint_key writes both in
-- one transaction), so no key is missing from it. A key id is now unique across tenants.
-- The app role has no grant on it (as on api_keys); row-level security as on every table.

CREATE TABLE api_key_tenants (
    key_id    text PRIMARY KEY,
    tenant_id uuid NOT NULL,
    UNIQUE (tenant_id, key_id)
);

-- On a cluster distributed before this migration (deploy/citus/distribute.sql makes the
-- table a reference table on a fresh one): a reference table now, before the foreign key
-- from the distributed api_keys, which Citus accepts only onto a reference table.
DO $$
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition
                   WHERE logicalrelid = 'api_keys'::regclass) THEN
            PERFORM create_reference_table('api_key_tenants');
        END IF;
    END IF;
END
$$;

ALTER TABLE api_key_tenants
    ADD CONSTRAINT api_key_tenants_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (tenant_id);
-- Filled before row-level security: on Citus a many-row INSERT ... SELECT is a COPY,
-- which a table under row-level security refuses (deploy/SCALING.md, item 7).
INSERT INTO api_key_tenants (key_id, tenant_id) SELECT key_id, tenant_id FROM api_keys;
SELECT brain_protect_table('api_key_tenants');
ALTER TABLE api_keys
    ADD CONSTRAINT api_keys_key_tenant_fkey FOREIGN KEY (tenant_id, key_id)
        REFERENCES api_key_tenants (tenant_id, key_id);

-- The tenant first (a local read of the reference table on a Citus coordinator), then the
-- key's row by (tenant_id, key_id): one shard, where `WHERE key_id = $1` was every shard.
CREATE OR REPLACE FUNCTION brain_lookup_key(p_key_id text)
RETURNS TABLE (
    tenant_id uuid, tenant_name text, key_id text, secret_hash bytea, principal text,
    permissions text[], confine_user_id text, confine_namespaces text[],
    confine_session_id text, labels text[], expires_at timestamptz, revoked_at timestamptz
)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
#variable_conflict use_column
DECLARE
    v_tenant uuid;
BEGIN
    SELECT i.tenant_id INTO v_tenant FROM api_key_tenants i WHERE i.key_id = p_key_id;
    IF v_tenant IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT k.tenant_id, t.name, k.key_id, k.secret_hash, k.principal, k.permissions,
           k.confine_user_id, k.confine_namespaces, k.confine_session_id, k.labels,
           k.expires_at, k.revoked_at
    FROM api_keys k JOIN tenants t USING (tenant_id)
    WHERE k.tenant_id = v_tenant AND k.key_id = p_key_id;
END
$$;
CREATE OR REPLACE FUNCTION brain_touch_key(p_key_id text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_tenant uuid;
    v_minute timestamptz := date_trunc('minute', now());
BEGIN
    SELECT i.tenant_id INTO v_tenant FROM api_key_tenants i WHERE i.key_id = p_key_id;
    IF v_tenant IS NULL THEN
        RETURN;
    END IF;
    UPDATE api_keys SET last_used_at = v_minute
    WHERE tenant_id = v_tenant AND key_id = p_key_id
      AND (last_used_at IS NULL OR last_used_at < v_minute);
END
$$;
