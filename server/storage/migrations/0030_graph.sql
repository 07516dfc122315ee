-- The entity graph (issue 19): entities and relations, asserted by memories.
--
-- An entity is one per tenant and normalised name; everything a caller learns about it
-- (display name, types, aliases, relations, counts) comes from the mentions and relations
-- of memories it can see. A mention or relation is a side record of the memory that
-- asserted it: visible exactly when that memory is (the head rule of migration 0005), and
-- an entity is visible exactly when one of its mentions is. Every relation endpoint is
-- also a mention of its memory, so "asserted by a memory" is "mentioned by it".
--
-- Transaction time (recorded_at / retired_at) is set by the server: a supersede retires
-- the old memory's rows, an UpdateMemory of the graph retires and replaces them, and a
-- single-valued relation closes its predecessor by retiring it and recording a copy whose
-- valid time ends. Rows of a proposal are `pending` until it is approved. Forgetting a
-- memory deletes its rows, and an entity no memory asserts any more is deleted with them.

CREATE TABLE graph_entities (
    tenant_id  uuid NOT NULL REFERENCES tenants (tenant_id),
    entity_id  uuid NOT NULL,
    name_norm  text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, entity_id),
    UNIQUE (tenant_id, name_norm)
);

CREATE TABLE graph_mentions (
    tenant_id   uuid NOT NULL,
    mention_id  uuid NOT NULL,
    memory_id   uuid NOT NULL,
    entity_id   uuid NOT NULL,
    name        text NOT NULL,
    type        text NOT NULL DEFAULT '',
    aliases     text[] NOT NULL DEFAULT '{}',
    alias_norms text[] NOT NULL DEFAULT '{}',
    pending     boolean NOT NULL DEFAULT false,
    recorded_at timestamptz NOT NULL,
    retired_at  timestamptz,
    PRIMARY KEY (tenant_id, mention_id),
    FOREIGN KEY (tenant_id, entity_id) REFERENCES graph_entities (tenant_id, entity_id),
    CHECK (retired_at IS NULL OR recorded_at <= retired_at)
);
CREATE INDEX graph_mentions_entity ON graph_mentions (tenant_id, entity_id);
CREATE INDEX graph_mentions_memory ON graph_mentions (tenant_id, memory_id);
CREATE INDEX graph_mentions_aliases ON graph_mentions USING gin (alias_norms);

CREATE TABLE graph_relations (
    tenant_id   uuid NOT NULL,
    relation_id uuid NOT NULL,
    memory_id   uuid NOT NULL,
    subject_id  uuid NOT NULL,
    predicate   text NOT NULL,
    object_id   uuid NOT NULL,
    cardinality text NOT NULL CHECK (cardinality IN ('one', 'many')),
    valid_from  timestamptz NOT NULL,
    valid_to    timestamptz,
    pending     boolean NOT NULL DEFAULT false,
    recorded_at timestamptz NOT NULL,
    retired_at  timestamptz,
    PRIMARY KEY (tenant_id, relation_id),
    FOREIGN KEY (tenant_id, subject_id) REFERENCES graph_entities (tenant_id, entity_id),
    FOREIGN KEY (tenant_id, object_id) REFERENCES graph_entities (tenant_id, entity_id),
    CHECK (valid_to IS NULL OR valid_from <= valid_to),
    CHECK (retired_at IS NULL OR recorded_at <= retired_at)
);
CREATE INDEX graph_relations_subject ON graph_relations (tenant_id, subject_id, predicate);
CREATE INDEX graph_relations_object ON graph_relations (tenant_id, object_id);
CREATE INDEX graph_relations_memory ON graph_relations (tenant_id, memory_id);

-- Mentions and relations follow their memory's head (labels, confinement, proposals).
SELECT brain_protect_table(
    'graph_mentions',
    'tenant_id = brain_current_tenant() AND brain_key_may_see_head(tenant_id, memory_id)');
SELECT brain_protect_table(
    'graph_relations',
    'tenant_id = brain_current_tenant() AND brain_key_may_see_head(tenant_id, memory_id)');
-- An entity follows its mentions (the subquery is itself under the mentions' policy).
-- The app role never writes entities directly: brain_graph_entities does.
SELECT brain_protect_table(
    'graph_entities',
    'tenant_id = brain_current_tenant() AND EXISTS (SELECT 1 FROM graph_mentions x '
    'WHERE x.tenant_id = graph_entities.tenant_id AND x.entity_id = graph_entities.entity_id)');
GRANT SELECT ON graph_entities TO brain_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON graph_mentions, graph_relations TO brain_app;

-- The ids of these normalised names in the caller's tenant, created when missing. A
-- writer needs the id of an entity other memories (perhaps invisible to it) assert; it
-- learns nothing from it, since the id is shown only through visible mentions. The rows
-- are locked (key share) until the writer commits, so brain_graph_drop_orphans cannot
-- delete an entity a mention is about to reference.
CREATE FUNCTION brain_graph_entities(p_names text[])
RETURNS TABLE (name_norm text, entity_id uuid)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
#variable_conflict use_column
DECLARE
    v_tenant uuid := brain_current_tenant();
BEGIN
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'brain_graph_entities: no tenant in this transaction';
    END IF;
    INSERT INTO graph_entities AS e (tenant_id, entity_id, name_norm)
    SELECT v_tenant, gen_random_uuid(), n FROM unnest(p_names) AS n
    ORDER BY n
    ON CONFLICT (tenant_id, name_norm) DO NOTHING;
    RETURN QUERY
        SELECT e.name_norm, e.entity_id FROM graph_entities e
        WHERE e.tenant_id = v_tenant AND e.name_norm = ANY (p_names)
        ORDER BY e.name_norm
        FOR KEY SHARE;
END
$$;
REVOKE ALL ON FUNCTION brain_graph_entities(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_graph_entities(text[]) TO brain_app;

-- Erasure: delete those of these entities that no memory asserts any more (their name
-- included). A concurrent writer that is adding a mention keeps its entity.
CREATE FUNCTION brain_graph_drop_orphans(p_entities uuid[]) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_tenant uuid := brain_current_tenant();
    v_id uuid;
    v_dropped integer := 0;
BEGIN
    FOREACH v_id IN ARRAY p_entities LOOP
        BEGIN
            DELETE FROM graph_entities e
            WHERE e.tenant_id = v_tenant AND e.entity_id = v_id
              AND NOT EXISTS (SELECT 1 FROM graph_mentions x
                              WHERE x.tenant_id = v_tenant AND x.entity_id = v_id)
              AND NOT EXISTS (SELECT 1 FROM graph_relations r
                              WHERE r.tenant_id = v_tenant
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
REVOKE ALL ON FUNCTION brain_graph_drop_orphans(uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_graph_drop_orphans(uuid[]) TO brain_app;
