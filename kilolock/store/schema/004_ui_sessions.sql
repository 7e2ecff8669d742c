-- Kilolock schema version 4: the dashboard's browser sessions.
--
-- A session is found by the SHA-256 (hex) of its cookie's secret: the secret
-- itself is never stored, so reading this table signs nobody in.  It keeps
-- the principal it signed in as (the fields of kilolock.core.model.Principal),
-- the SHA-256 of the token it signed in with (checked again on every
-- request: revoking the token ends the session), the CSRF token of its
-- forms and when it expires.  tenant_id is plain text: a session outlives
-- nothing, and expired rows are deleted when a new session is created.
CREATE TABLE ui_sessions (
    id_hash            text PRIMARY KEY,
    tenant_id          text NOT NULL,
    name               text NOT NULL,
    scope              text NOT NULL,
    workspace_id       text,
    env_public_id      text,
    token_id           text,
    credential_digest  text,
    csrf               text NOT NULL,
    created_at         timestamptz NOT NULL,
    expires_at         timestamptz NOT NULL
);

CREATE INDEX ui_sessions_expires ON ui_sessions (expires_at);

-- A listing page sorted by when states changed (the dashboard's default
-- for the most recent first).
CREATE INDEX states_tenant_updated ON states (tenant_id, updated_at);
