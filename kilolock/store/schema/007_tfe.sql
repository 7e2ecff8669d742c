-- Kilolock schema version 7: the TFE lane (Terraform's cloud {} block and
-- remote backend) and outputs-only tokens.
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- A TFE workspace is a state (tenant_id, path) with a public id
-- ('ws-' + 16 letters and digits) and tags.  The state row itself may not
-- exist yet (a workspace created before its first write) or any more (a
-- state deleted through the HTTP lane): path is text, not a reference.
-- tags is a JSON array of [key, value] pairs in order (value '' for a plain
-- tag).
CREATE TABLE tfe_workspaces (
    id          text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (id),
    path        text NOT NULL,
    created_at  timestamptz NOT NULL,
    tags        jsonb NOT NULL DEFAULT '[]',
    CONSTRAINT tfe_workspaces_tenant_path UNIQUE (tenant_id, path)
);

-- A state version announced through the TFE lane whose bytes come later,
-- PUT to an upload URL that is a capability: grant_hash is the SHA-256 of
-- that capability (never the capability itself).  The bytes are stored as
-- an ordinary version of the state (state_versions) when they arrive;
-- version is then its number.
CREATE TABLE tfe_pending_versions (
    id             text PRIMARY KEY,
    workspace_id   text NOT NULL REFERENCES tfe_workspaces (id) ON DELETE CASCADE,
    tenant_id      text NOT NULL,
    path           text NOT NULL,
    serial         bigint NOT NULL,
    lineage        text NOT NULL,
    md5            text NOT NULL,
    lock_id        text NOT NULL,
    principal      text NOT NULL,
    grant_hash     text NOT NULL,
    created_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    status         text NOT NULL
                   CHECK (status IN ('pending', 'uploading', 'finalized', 'discarded')),
    json_received  boolean NOT NULL DEFAULT false,
    version        integer
);

CREATE INDEX tfe_pending_versions_expiry ON tfe_pending_versions (expires_at);
CREATE INDEX tfe_pending_versions_workspace ON tfe_pending_versions (workspace_id);

-- Hosted tokens may be outputs-only: they read TFE workspaces and
-- non-sensitive outputs, nothing else.
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_scope_check;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_scope_check
    CHECK (scope IN ('write', 'read', 'outputs'));
