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

-- The graph's and the conflicts' definer functions read the tenant from the transaction.
-- Each gets a twin taking it as its first argument: the same body over that argument (under
-- forced delegation Citus accepts a statement such as INSERT ... SELECT only when it filters
-- by, and inserts, the distribution argument itself), refusing any tenant but the
-- transaction's.
CREATE FUNCTION brain_graph_entities(p_tenant uuid, p_names text[])
RETURNS TABLE (name_norm text, entity_id uuid)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
#variable_conflict use_column
BEGIN
    IF p_tenant IS NULL OR p_tenant IS DISTINCT FROM brain_current_tenant() THEN
        RAISE EXCEPTION 'brain_graph_entities: not this transaction''s tenant';
    END IF;
    INSERT INTO graph_entities AS e (tenant_id, entity_id, name_norm)
    SELECT p_tenant, gen_random_uuid(), n FROM unnest(p_names) AS n
    ORDER BY n
    ON CONFLICT (tenant_id, name_norm) DO NOTHING;
    RETURN QUERY
        SELECT e.name_norm, e.entity_id FROM graph_entities e
        WHERE e.tenant_id = p_tenant AND e.name_norm = ANY (p_names)
        ORDER BY e.name_norm
        FOR KEY SHARE;
END
$$;
CREATE FUNCTION brain_graph_reopen(p_tenant uuid, p_memory uuid, p_closed boolean) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_copy record;
    v_reopened integer := 0;
BEGIN
    IF p_tenant IS NULL OR p_tenant IS DISTINCT FROM brain_current_tenant() THEN
        RAISE EXCEPTION 'brain_graph_reopen: not this transaction''s tenant';
    END IF;
    FOR v_copy IN
        SELECT relation_id FROM graph_relations
        WHERE tenant_id = p_tenant
          AND (closed_by = p_memory
               OR (p_closed AND memory_id = p_memory AND closed_by IS NOT NULL))
        ORDER BY recorded_at, relation_id
    LOOP
        -- Read again: an earlier step of this loop may have moved its pointer.
        UPDATE graph_relations o SET retired_at = c.retired_at
        FROM graph_relations c
        WHERE c.tenant_id = p_tenant AND c.relation_id = v_copy.relation_id
          AND o.tenant_id = p_tenant AND o.relation_id = c.replaces;
        -- A later close of the copy now replaces the reopened row.
        UPDATE graph_relations n SET replaces = c.replaces
        FROM graph_relations c
        WHERE c.tenant_id = p_tenant AND c.relation_id = v_copy.relation_id
          AND n.tenant_id = p_tenant AND n.replaces = c.relation_id;
        DELETE FROM graph_relations WHERE tenant_id = p_tenant AND relation_id = v_copy.relation_id;
        v_reopened := v_reopened + 1;
    END LOOP;
    RETURN v_reopened;
END
$$;
CREATE FUNCTION brain_graph_drop_orphans(p_tenant uuid, p_entities uuid[]) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_id uuid;
    v_dropped integer := 0;
BEGIN
    IF p_tenant IS NULL OR p_tenant IS DISTINCT FROM brain_current_tenant() THEN
        RAISE EXCEPTION 'brain_graph_drop_orphans: not this transaction''s tenant';
    END IF;
    FOREACH v_id IN ARRAY p_entities LOOP
        BEGIN
            DELETE FROM graph_entities e
            WHERE e.tenant_id = p_tenant AND e.entity_id = v_id
              AND NOT EXISTS (SELECT 1 FROM graph_mentions x
                              WHERE x.tenant_id = p_tenant AND x.entity_id = v_id)
              AND NOT EXISTS (SELECT 1 FROM graph_relations r
                              WHERE r.tenant_id = p_tenant
                                AND (r.subject_id = v_id OR r.object_id = v_id));
            IF FOUND THEN
                v_dropped := v_dropped + 1;
            END IF;
        EXCEPTION WHEN foreign_key_violation THEN
            NULL;  -- a concurrent writer referenced it meanwhile: it is asserted again
        END;
    END LOOP;
    RETURN v_dropped;
END
$$;
CREATE FUNCTION brain_reopen_superseded(
    p_tenant uuid, p_forgotten uuid, p_at timestamptz, p_by text, p_key text, p_ttl interval
) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_old record;
    v_count integer := 0;
BEGIN
    IF p_tenant IS NULL OR p_tenant IS DISTINCT FROM brain_current_tenant() THEN
        RAISE EXCEPTION 'brain_reopen_superseded: not this transaction''s tenant';
    END IF;
    FOR v_old IN
        SELECT o.memory_id, o.version FROM memories o
        WHERE o.tenant_id = p_tenant AND o.retired_at IS NULL AND o.status = 'superseded'
          AND p_forgotten = ANY (o.superseded_by)
        ORDER BY o.memory_id
        FOR UPDATE
    LOOP
        UPDATE memories SET retired_at = p_at
        WHERE tenant_id = p_tenant AND memory_id = v_old.memory_id
          AND version = v_old.version;
        INSERT INTO memories (
            tenant_id, memory_id, version, namespace, user_id, session_id, content,
            fingerprint, kind, tags, metadata, labels, status, confidence, importance,
            valid_from, valid_to, recorded_at, retired_at, expires_at, created_by,
            changed_by, changed_by_key, change, reviewed_by, reviewed_at, review_reason,
            proposal_reason, candidate_expires_at, supersedes, superseded_by, embedding,
            embedding_model)
        SELECT p_tenant, memory_id, version + 1, namespace, user_id, session_id, content,
               fingerprint, kind, tags, metadata, labels, 'candidate', confidence,
               importance, valid_from, valid_to, p_at, NULL, expires_at, created_by,
               p_by, p_key, 'reopen', NULL, NULL, NULL,
               'reopened for review: the memory that superseded it was forgotten',
               p_at + p_ttl, supersedes, array_remove(superseded_by, p_forgotten),
               embedding, embedding_model
        FROM memories
        WHERE tenant_id = p_tenant AND memory_id = v_old.memory_id
          AND version = v_old.version;
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
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
