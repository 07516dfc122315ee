-- Idempotency records keep the first response for replays, and that response shows the
-- memory it wrote, content included. The clients now attach a key to every write, so each
-- record names its memory: forgetting the memory blanks its content in the stored
-- responses too (records from before this migration name none and are not covered).
ALTER TABLE idempotency_keys ADD COLUMN memory_id uuid;

CREATE INDEX idempotency_keys_memory ON idempotency_keys (tenant_id, memory_id)
    WHERE memory_id IS NOT NULL;

-- Records are kept for a retention period (24 hours by default): each claim first drops
-- the calling key's expired records, so the table follows the write rate, not history.
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (tenant_id, key_id, created_at);
