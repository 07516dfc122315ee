-- Distribute a freshly migrated Shared Brain schema on a Citus coordinator (issue 29).
-- Run as the owner (brain_owner) after `brain-admin migrate`, once, on an empty database:
--   psql -v ON_ERROR_STOP=1 -d brain -f deploy/citus/distribute.sql
-- Tested by tests/citus.sh (make test-citus) on Citus 13.2.2 / PostgreSQL 15. The policies
-- distribute because migration 0057, run where Citus is installed, took the subqueries out
-- of the three that held one (lexical_terms, graph_entities, audit_cell_events). See
-- deploy/SCALING.md.
--
-- tenants, brain_schema_migrations and api_key_tenants (a key's tenant, migration 0061)
-- become reference tables (a copy on every node);
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
SELECT create_reference_table('api_key_tenants');
SELECT create_distributed_table('memories', 'tenant_id');
SELECT create_distributed_table(t, 'tenant_id', colocate_with => 'memories')
FROM unnest(ARRAY['api_keys', 'tombstones', 'idempotency_keys', 'namespace_policies',
                  'audit_events', 'audit_heads', 'tenant_quotas', 'lexical_cells',
                  'lexical_terms', 'documents', 'document_chunks', 'document_tombstones',
                  'graph_entities',
                  'graph_mentions', 'graph_relations', 'audit_cells', 'audit_cell_events',
                  'memory_conflicts']) AS t
WHERE to_regclass(t) IS NOT NULL;
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT * FROM brain_fks LOOP
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I %s', r.tbl, r.conname, r.def);
    END LOOP;
END $$;
-- Definer functions a request calls inside its write transaction run on the tenant's worker,
-- in the request's connection (migration 0059 says why).
SELECT create_distributed_function(f::regprocedure, 'p_tenant', colocate_with => 'memories',
                                   force_delegation => true)
FROM unnest(ARRAY['brain_reserve_memories(uuid)', 'brain_reserve_documents(uuid)',
                  'brain_pending_candidates(uuid, text)',
                  'brain_proposals_since(uuid, text, timestamptz)',
                  'brain_graph_entities(uuid, text[])', 'brain_graph_reopen(uuid, uuid, boolean)',
                  'brain_graph_drop_orphans(uuid, uuid[])',
                  'brain_reopen_superseded(uuid, uuid, timestamptz, text, text, interval)']) AS f;
COMMIT;
