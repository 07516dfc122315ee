-- Distribute a freshly migrated Shared Brain schema on a Citus coordinator (issue 29).
-- Run as the owner (brain_owner) after `brain-admin migrate`, once, on an empty database:
--   psql -v ON_ERROR_STOP=1 -d brain -f deploy/citus/distribute.sql
-- Tested by tests/citus.sh (make test-citus) on Citus 13.2.2 / PostgreSQL 15, after
-- lab-overlay.sql: without it, create_distributed_table refuses the two policies that hold
-- a subquery (lexical_terms, graph_entities). See deploy/SCALING.md.
--
-- tenants and brain_schema_migrations become reference tables (a copy on every node);
-- every other table is hash-distributed by tenant_id, co-located with memories, so a
-- tenant's rows of every table live in one shard group on one worker.
--
-- The foreign keys are dropped while the tables are distributed and added back after:
-- made a reference table while local tables still reference it, tenants would turn every
-- one of them into a "Citus local table", which refuses row-level security policies.
BEGIN;
-- One connection per node for the whole transaction: adding foreign keys to a reference
-- table after parallel work in the same transaction is refused otherwise.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
CREATE TEMP TABLE brain_fks ON COMMIT DROP AS
    SELECT conrelid::regclass::text AS tbl, conname, pg_get_constraintdef(oid) AS def
    FROM pg_constraint
    WHERE contype = 'f' AND connamespace = 'public'::regnamespace;
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT * FROM brain_fks LOOP
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', r.tbl, r.conname);
    END LOOP;
END $$;
SELECT create_reference_table('tenants');
SELECT create_reference_table('brain_schema_migrations');
SELECT create_distributed_table('memories', 'tenant_id');
SELECT create_distributed_table(t, 'tenant_id', colocate_with => 'memories')
FROM unnest(ARRAY['api_keys', 'tombstones', 'idempotency_keys', 'namespace_policies',
                  'audit_events', 'audit_heads', 'tenant_quotas', 'lexical_cells',
                  'lexical_terms', 'documents', 'document_chunks', 'document_tombstones',
                  'graph_entities',
                  'graph_mentions', 'graph_relations']) AS t
WHERE to_regclass(t) IS NOT NULL;
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT * FROM brain_fks LOOP
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I %s', r.tbl, r.conname, r.def);
    END LOOP;
END $$;
COMMIT;
