-- Memory lifecycle: tombstones, idempotency keys, namespace policies.

-- A forgotten or rejected value's fingerprint (keyed hash of the normalised content)
-- in its bucket. A later save or proposal of the same value there is refused until a
-- reviewer re-admits it.
CREATE TABLE tombstones (
    tenant_id     uuid NOT NULL REFERENCES tenants (tenant_id),
    tombstone_id  uuid NOT NULL,
    namespace     text NOT NULL,
    user_id       text NOT NULL,
    session_id    text NOT NULL,
    fingerprint   bytea NOT NULL,
    memory_id     uuid NOT NULL,
    cause         text NOT NULL CHECK (cause IN ('forget', 'reject')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    created_by    text NOT NULL,
    readmitted_at timestamptz,
    readmitted_by text,
    PRIMARY KEY (tenant_id, tombstone_id)
);
CREATE UNIQUE INDEX tombstones_live
    ON tombstones (tenant_id, namespace, user_id, session_id, fingerprint)
    WHERE readmitted_at IS NULL;

-- Same idempotency key + same body returns the first response; another body is refused.
CREATE TABLE idempotency_keys (
    tenant_id       uuid NOT NULL REFERENCES tenants (tenant_id),
    key_id          text NOT NULL,
    idempotency_key text NOT NULL,
    method          text NOT NULL,
    request_hash    bytea NOT NULL,
    response        bytea,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key_id, idempotency_key)
);

-- Per-namespace settings, changed only with brain-admin.
CREATE TABLE namespace_policies (
    tenant_id       uuid NOT NULL REFERENCES tenants (tenant_id),
    namespace       text NOT NULL,
    review_required boolean NOT NULL DEFAULT false,
    candidate_ttl   interval NOT NULL DEFAULT interval '7 days',
    max_pending     integer NOT NULL DEFAULT 1000 CHECK (max_pending > 0),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, namespace)
);

SELECT brain_protect_table(
    'tombstones',
    'tenant_id = brain_current_tenant() AND brain_key_confines(namespace, user_id, session_id)');
-- A key sees only its own idempotency records.
SELECT brain_protect_table(
    'idempotency_keys',
    'tenant_id = brain_current_tenant() AND key_id = current_setting(''brain.key_id'', true)');
SELECT brain_protect_table('namespace_policies');

GRANT SELECT, INSERT, UPDATE ON tombstones TO brain_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO brain_app;
GRANT SELECT ON namespace_policies TO brain_app;

-- Lists page newest first by memory id (UUIDv7, time-ordered).
CREATE INDEX memories_list ON memories (tenant_id, memory_id DESC) WHERE retired_at IS NULL;
