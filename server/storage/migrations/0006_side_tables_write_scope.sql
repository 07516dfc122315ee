-- Side tables obey the same walls as rows (issue 11, class 2).
--
-- A tombstone binds only callers who could see the memory it erased, so each memory
-- keeps its own live tombstone per value: with one tombstone per (bucket, value), a
-- memory forgotten later would share the tombstone of an earlier one that the caller
-- may not see, and its value would come back for exactly the callers who saw it go.
DROP INDEX tombstones_live;
CREATE UNIQUE INDEX tombstones_live
    ON tombstones (tenant_id, namespace, user_id, session_id, fingerprint, memory_id)
    WHERE readmitted_at IS NULL;
-- Finding the memory a tombstone was left by (forgetting twice, erasure checks).
CREATE INDEX tombstones_memory ON tombstones (tenant_id, memory_id);
