-- Kilolock schema version 9: the KL-native lane's write side -- server-side
-- state operations and upload sessions -- and finding versions by digest.
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- A state operation (kilolock.stateops): owned by the tenant and the
-- principal that created it (tenant_id, principal: every lookup filters on
-- both, so another caller's operation is simply not found).  request,
-- progress, result and error are JSON text (never state bytes).  The
-- process running it (runner) renews lease_expires_at while it works; a
-- running operation whose lease expired was abandoned by a process that
-- stopped: the next process to look marks it failed and releases the locks
-- it held (locks: JSON [[state path, lock ID], ...]).
CREATE TABLE state_operations (
    id                text PRIMARY KEY,
    tenant_id         text NOT NULL,
    principal         text NOT NULL,
    kind              text NOT NULL,
    request           text NOT NULL,
    status            text NOT NULL
                      CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
    progress          text NOT NULL DEFAULT '{}',
    result            text,
    error             text,
    cancel_requested  boolean NOT NULL DEFAULT false,
    runner            text NOT NULL,
    lease_expires_at  timestamptz,
    locks             text NOT NULL DEFAULT '[]',
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL
);

CREATE INDEX state_operations_lease ON state_operations (lease_expires_at)
    WHERE status = 'running';

-- An upload of a state's bytes in chunks (owned like an operation), and its
-- chunks: the bytes as received, any order, no two overlapping
-- (kilolock.stateops.chunks).  A committed session keeps its row (and the
-- version it became) until it expires; its chunks are dropped.
CREATE TABLE upload_sessions (
    id                 text PRIMARY KEY,
    tenant_id          text NOT NULL,
    principal          text NOT NULL,
    state_path         text NOT NULL,
    size               bigint NOT NULL,
    sha256             text NOT NULL,
    created_at         timestamptz NOT NULL,
    expires_at         timestamptz NOT NULL,
    committed_version  integer
);

CREATE INDEX upload_sessions_expires ON upload_sessions (expires_at);
CREATE INDEX upload_sessions_owner ON upload_sessions (tenant_id, principal);

CREATE TABLE upload_chunks (
    session_id  text NOT NULL REFERENCES upload_sessions (id) ON DELETE CASCADE,
    "offset"    bigint NOT NULL,
    length      bigint NOT NULL,
    sha256      text NOT NULL,
    data        bytea NOT NULL,
    PRIMARY KEY (session_id, "offset")
);

-- Chunks are state bytes, often already compressed by nothing: keep
-- PostgreSQL from trying pglz on them.
ALTER TABLE upload_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

-- A tenant's versions by the SHA-256 of their bytes (GET /v1/native/blobs).
CREATE INDEX state_versions_sha256 ON state_versions (sha256);
