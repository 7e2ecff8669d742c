-- Kilolock schema version 1: tenants, states, versions, locks, projection, audit events.
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema() inside one transaction,
-- which also records the version in schema_version.  Never edit a released
-- file: add the next numbered one.

-- A tenant owns states and the head of its audit hash chain.  The chain head
-- (last seq and hash) lives here so that appending an event locks one row and
-- needs no scan of events.
CREATE TABLE tenants (
    id          text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    chain_seq   integer NOT NULL DEFAULT 0,
    chain_head  text NOT NULL DEFAULT repeat('0', 64)
);

INSERT INTO tenants (id) VALUES ('default') ON CONFLICT (id) DO NOTHING;

-- One state of one tenant.  A row exists once a version was written or a
-- lock was taken; it carries no pointer to its current version: the current
-- version is the one with the highest number (one probe of
-- state_versions_number).
CREATE TABLE states (
    id          bigserial PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (id),
    path        text NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    CONSTRAINT states_tenant_path UNIQUE (tenant_id, path)
);

-- Every accepted write, byte-for-byte.  Serials are not unique: only the
-- current version's serial conflicts (see PostgresStateStore.write_state).
CREATE TABLE state_versions (
    id              bigserial PRIMARY KEY,
    state_id        bigint NOT NULL REFERENCES states (id) ON DELETE CASCADE,
    number          integer NOT NULL,
    serial          bigint NOT NULL,
    lineage         text NOT NULL,
    sha256          text NOT NULL,
    size            bigint NOT NULL,
    raw_state       bytea NOT NULL,
    created_at      timestamptz NOT NULL,
    principal       text NOT NULL,
    projected       boolean NOT NULL,
    resource_count  integer NOT NULL DEFAULT 0,
    CONSTRAINT state_versions_number UNIQUE (state_id, number)
);

CREATE INDEX state_versions_serial ON state_versions (state_id, serial);

-- The lock held on a state, if any (no row: unlocked).  info is the LockInfo
-- body exactly as it arrived on LOCK.
CREATE TABLE locks (
    state_id     bigint PRIMARY KEY REFERENCES states (id) ON DELETE CASCADE,
    lock_id      text NOT NULL,
    info         bytea NOT NULL,
    acquired_at  timestamptz NOT NULL,
    principal    text NOT NULL
);

-- The projection of each state's current version (rows of older versions are
-- deleted when a new version is written).  ordinal keeps the state's order.
CREATE TABLE resources (
    state_id    bigint NOT NULL REFERENCES states (id) ON DELETE CASCADE,
    version_id  bigint NOT NULL REFERENCES state_versions (id) ON DELETE CASCADE,
    ordinal     integer NOT NULL,
    address     text NOT NULL,
    module      text NOT NULL,
    mode        text NOT NULL,
    type        text NOT NULL,
    name        text NOT NULL,
    provider    text NOT NULL,
    index_key   jsonb,
    deposed     text,
    attributes  jsonb NOT NULL,
    PRIMARY KEY (version_id, ordinal)
);

CREATE INDEX resources_state ON resources (state_id);
CREATE INDEX resources_type ON resources (type);

CREATE TABLE resource_dependencies (
    state_id    bigint NOT NULL REFERENCES states (id) ON DELETE CASCADE,
    version_id  bigint NOT NULL REFERENCES state_versions (id) ON DELETE CASCADE,
    ordinal     integer NOT NULL,
    address     text NOT NULL,
    depends_on  text NOT NULL,
    PRIMARY KEY (version_id, ordinal)
);

CREATE INDEX resource_dependencies_state ON resource_dependencies (state_id);

CREATE TABLE outputs (
    state_id    bigint NOT NULL REFERENCES states (id) ON DELETE CASCADE,
    version_id  bigint NOT NULL REFERENCES state_versions (id) ON DELETE CASCADE,
    ordinal     integer NOT NULL,
    name        text NOT NULL,
    type        jsonb,
    value       jsonb,  -- NULL when the output is sensitive
    sensitive   boolean NOT NULL,
    PRIMARY KEY (version_id, ordinal)
);

CREATE INDEX outputs_state ON outputs (state_id);

-- The audit trail, hash-chained per tenant (kilolock.core.audit.event_hash).
-- state_path is text, not a reference: events outlive the state they record.
-- detail is the exact JSON text that was hashed.
CREATE TABLE events (
    id          bigserial PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (id),
    seq         integer NOT NULL,
    kind        text NOT NULL,
    state_path  text,
    principal   text NOT NULL,
    at          timestamptz NOT NULL,
    lock_id     text,
    serial      bigint,
    sha256      text,
    detail      text NOT NULL DEFAULT '{}',
    prev_hash   text NOT NULL,
    hash        text NOT NULL,
    CONSTRAINT events_tenant_seq UNIQUE (tenant_id, seq)
);

CREATE INDEX events_tenant_path ON events (tenant_id, state_path, seq);
CREATE INDEX events_tenant_at ON events (tenant_id, at);
