-- Definer functions a request calls inside its write transaction run where the tenant's
-- shard is (issue 29).
--
-- On Citus a SECURITY DEFINER function called on the coordinator opens the owner's own
-- connections to the workers; once the request's transaction has written to the tenant's
-- shard as the app role, every such read fails: "cannot perform query on placements that
-- were modified in this transaction by a different user". Every save reserves its place
-- under the tenant's memory quota this way, so every save failed on a cluster.
--
-- A function whose tenant is an argument can be distributed by it, colocated with
-- memories and delegated even inside a transaction: the call then runs on the worker that
-- holds the tenant, in the request's own connection there. brain_reserve_memories gets
-- that argument (the tenant-less version of 0009 stays for servers of earlier releases);
-- brain_pending_candidates (0007) and brain_proposals_since (0056) have it already, and the
-- graph's and the conflicts' functions get twins that take it. Each answers only for the
-- transaction's own tenant. On PostgreSQL nothing else changes.

CREATE FUNCTION brain_reserve_memories(p_tenant uuid)
RETURNS TABLE (max_memories bigint, used bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_max bigint;
BEGIN
    IF p_tenant IS NULL OR p_tenant IS DISTINCT FROM brain_current_tenant() THEN
        RETURN;
    END IF;
    SELECT q.max_memories INTO v_max FROM tenant_quotas q WHERE q.tenant_id = p_tenant;
    IF v_max IS NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('brain.quota.memories/' || p_tenant, 0));
    RETURN QUERY SELECT v_max, brain_memories_used(p_tenant);
END
$$;
REVOKE ALL ON FUNCTION brain_reserve_memories(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_reserve_memories(uuid) TO brain_app;

-- The graph's and the conflicts' definer functions read the tenant from the transaction;
-- each gets a twin taking it as its first argument, which checks it and calls the original
-- (delegated, both run on the tenant's worker).
CREATE FUNCTION brain_graph_entities(p_tenant uuid, p_names text[])
RETURNS TABLE (name_norm text, entity_id uuid)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public
AS $$
BEGIN
    IF p_tenant IS NULL OR p_tenant IS DISTINCT FROM brain_current_tenant() THEN
        RAISE EXCEPTION 'brain_graph_entities: not this transaction''s tenant';
    END IF;
    RETURN QUERY SELECT * FROM brain_graph_entities(p_names);
END
$$;
CREATE FUNCTION brain_graph_reopen(p_tenant uuid, p_memory uuid, p_closed boolean)
RETURNS integer
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public
AS $$
BEGIN
    IF p_tenant IS NULL OR p_tenant IS DISTINCT FROM brain_current_tenant() THEN
        RAISE EXCEPTION 'brain_graph_reopen: not this transaction''s tenant';
    END IF;
    RETURN brain_graph_reopen(p_memory, p_closed);
END
$$;
CREATE FUNCTION brain_graph_drop_orphans(p_tenant uuid, p_entities uuid[]) RETURNS integer
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public
AS $$
BEGIN
    IF p_tenant IS NULL OR p_tenant IS DISTINCT FROM brain_current_tenant() THEN
        RAISE EXCEPTION 'brain_graph_drop_orphans: not this transaction''s tenant';
    END IF;
    RETURN brain_graph_drop_orphans(p_entities);
END
$$;
CREATE FUNCTION brain_reopen_superseded(
    p_tenant uuid, p_forgotten uuid, p_at timestamptz, p_by text, p_key text, p_ttl interval
) RETURNS integer
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public
AS $$
BEGIN
    IF p_tenant IS NULL OR p_tenant IS DISTINCT FROM brain_current_tenant() THEN
        RAISE EXCEPTION 'brain_reopen_superseded: not this transaction''s tenant';
    END IF;
    RETURN brain_reopen_superseded(p_forgotten, p_at, p_by, p_key, p_ttl);
END
$$;
REVOKE ALL ON FUNCTION brain_graph_entities(uuid, text[]), brain_graph_reopen(uuid, uuid, boolean),
    brain_graph_drop_orphans(uuid, uuid[]),
    brain_reopen_superseded(uuid, uuid, timestamptz, text, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_graph_entities(uuid, text[]),
    brain_graph_reopen(uuid, uuid, boolean), brain_graph_drop_orphans(uuid, uuid[]),
    brain_reopen_superseded(uuid, uuid, timestamptz, text, text, interval) TO brain_app;

-- Where the tables are distributed already (a later migration on a running cluster); a
-- fresh cluster gets the same calls from deploy/citus/distribute.sql.
DO $$
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition
                   WHERE logicalrelid = 'memories'::regclass) THEN
        RETURN;
    END IF;
    EXECUTE $c$
        SELECT create_distributed_function(f::regprocedure, 'p_tenant', colocate_with => 'memories',
                                           force_delegation => true)
        FROM unnest(ARRAY['brain_reserve_memories(uuid)',
                          'brain_pending_candidates(uuid, text)',
                          'brain_proposals_since(uuid, text, timestamptz)',
                          'brain_graph_entities(uuid, text[])',
                          'brain_graph_reopen(uuid, uuid, boolean)',
                          'brain_graph_drop_orphans(uuid, uuid[])',
                          'brain_reopen_superseded(uuid, uuid, timestamptz, text, text, interval)'
                         ]) AS f
    $c$;
END
$$;
