-- Watchers are woken by the server, not by the audit trigger (issue 29).
--
-- brain_audit_append ran `pg_notify('brain_audit', ...)` inside the write. On a Citus
-- cluster the audit triggers run on the worker that holds the tenant's shard, so the
-- notification was delivered on that worker (where no server listens), and a transaction
-- that then touched a second node failed at commit: "cannot PREPARE a transaction that has
-- executed LISTEN, UNLISTEN, or NOTIFY". The server now sends `NOTIFY brain_audit,
-- '<tenant id>'` itself in every write transaction, from its own connection (the
-- coordinator on Citus), with the transaction's settings (storage/db.py); like the
-- trigger's, it is delivered at commit and only if the transaction commits.
--
-- The function is otherwise unchanged: the same chain, the same lock, the same event.

CREATE OR REPLACE FUNCTION brain_audit_append(
    p_tenant uuid, p_key_id text, p_principal text, p_method text,
    p_memory_ids uuid[], p_outcome text
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $$
DECLARE
    v_prev bytea;
    v_seq bigint;
    v_at timestamptz;
    v_hash bytea;
BEGIN
    SELECT seq, hash INTO v_seq, v_prev FROM audit_heads WHERE tenant_id = p_tenant FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO audit_heads (tenant_id, seq, hash)
        VALUES (p_tenant, 0, decode(repeat('00', 32), 'hex'))
        ON CONFLICT (tenant_id) DO NOTHING;
        SELECT seq, hash INTO v_seq, v_prev FROM audit_heads WHERE tenant_id = p_tenant FOR UPDATE;
    END IF;
    v_seq := v_seq + 1;
    -- Taken under the head lock, so time never runs backwards along a chain.
    v_at := clock_timestamp();
    v_hash := sha256(v_prev || brain_audit_canonical(
        p_tenant, v_seq, v_at, p_key_id, p_principal, p_method, p_memory_ids, p_outcome));
    INSERT INTO audit_events (tenant_id, seq, at, key_id, principal, method, memory_ids,
                              outcome, prev_hash, hash)
    VALUES (p_tenant, v_seq, v_at, p_key_id, p_principal, p_method, p_memory_ids,
            p_outcome, v_prev, v_hash);
    UPDATE audit_heads SET seq = v_seq, hash = v_hash WHERE tenant_id = p_tenant;
    RETURN v_seq;
END
$$;
