-- The entity graph, after its security review (issue 19).
--
-- A single-valued relation closes its predecessor by retiring it and recording a copy
-- whose valid time ends where the new fact begins. The copy now says which memory closed
-- it (closed_by) and which row it replaced (replaces), so forgetting the closing memory
-- can undo the close: its date is a trace of the erased memory.
--
-- A proposal's relations also keep the write confinement of the key that proposed them
-- (writer_user, writer_session; NULL = not confined): on approval they close only facts
-- the proposer could have changed, never with the reviewer's wider write power.

ALTER TABLE graph_relations
    ADD COLUMN closed_by      uuid,
    ADD COLUMN replaces       uuid,
    ADD COLUMN writer_user    text,
    ADD COLUMN writer_session text;
CREATE INDEX graph_relations_closed_by ON graph_relations (tenant_id, closed_by)
    WHERE closed_by IS NOT NULL;

-- Undo the closes p_memory made (erasure of it, or its labels or expiry changed), and with
-- p_closed also the closes of p_memory's own facts by others (its labels or expiry changed,
-- so the closer may no longer be seen by everyone who sees them). Each copy is deleted and
-- the row it replaced is believed again for as long as the copy was (so a later close of
-- the copy carries over to it). Definer rights: the closed facts may belong to memories
-- the calling key cannot see, and leaving them closed would keep the closer's date.
CREATE FUNCTION brain_graph_reopen(p_memory uuid, p_closed boolean) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_tenant uuid := brain_current_tenant();
    v_copy record;
    v_reopened integer := 0;
BEGIN
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'brain_graph_reopen: no tenant in this transaction';
    END IF;
    FOR v_copy IN
        SELECT relation_id FROM graph_relations
        WHERE tenant_id = v_tenant
          AND (closed_by = p_memory
               OR (p_closed AND memory_id = p_memory AND closed_by IS NOT NULL))
        ORDER BY recorded_at, relation_id
    LOOP
        -- Read again: an earlier step of this loop may have moved its pointer.
        UPDATE graph_relations o SET retired_at = c.retired_at
        FROM graph_relations c
        WHERE c.tenant_id = v_tenant AND c.relation_id = v_copy.relation_id
          AND o.tenant_id = v_tenant AND o.relation_id = c.replaces;
        -- A later close of the copy now replaces the reopened row.
        UPDATE graph_relations n SET replaces = c.replaces
        FROM graph_relations c
        WHERE c.tenant_id = v_tenant AND c.relation_id = v_copy.relation_id
          AND n.tenant_id = v_tenant AND n.replaces = c.relation_id;
        DELETE FROM graph_relations WHERE tenant_id = v_tenant AND relation_id = v_copy.relation_id;
        v_reopened := v_reopened + 1;
    END LOOP;
    RETURN v_reopened;
END
$$;
REVOKE ALL ON FUNCTION brain_graph_reopen(uuid, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION brain_graph_reopen(uuid, boolean) TO brain_app;
