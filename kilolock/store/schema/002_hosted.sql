-- Kilolock schema version 2: hosted mode (KL_AUTH_MODE=database).
--
-- Tenants managed by the control API, their workspaces and environments, and
-- API tokens.  Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a
-- released file: add the next numbered one.

-- A hosted tenant has an id 'tn_' + 12 hex (it keys its states and its audit
-- chain for ever), a slug unique among live tenants, and a display name.
-- Deleting a tenant keeps its row (deleted_at set; the slug may then be
-- reused by a new tenant) so that its events keep their owner.  The tenants
-- of the open and static modes ('default') have no slug.
ALTER TABLE tenants
    ADD COLUMN slug        text,
    ADD COLUMN name        text,
    ADD COLUMN deleted_at  timestamptz;

CREATE UNIQUE INDEX tenants_live_slug ON tenants (slug)
    WHERE slug IS NOT NULL AND deleted_at IS NULL;

-- id: 'ws_' + 12 hex, the first segment of a hosted state path.
CREATE TABLE workspaces (
    id          text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (id),
    name        text NOT NULL,
    created_at  timestamptz NOT NULL,
    CONSTRAINT workspaces_tenant_name UNIQUE (tenant_id, name)
);

-- id: 'env_' + 12 hex (the env_public_id), the second segment of a hosted
-- state path.
CREATE TABLE environments (
    id            text PRIMARY KEY,
    workspace_id  text NOT NULL REFERENCES workspaces (id),
    tenant_id     text NOT NULL REFERENCES tenants (id),
    name          text NOT NULL,
    created_at    timestamptz NOT NULL,
    CONSTRAINT environments_workspace_name UNIQUE (workspace_id, name)
);

CREATE INDEX environments_tenant ON environments (tenant_id);

-- id: 'tok_' + 12 hex.  token_hash is the SHA-256 (hex) of the whole secret;
-- the secret itself is never stored.  workspace_id and env_public_id are
-- plain text, not references: a revoked token keeps naming what it was for
-- after its environment is deleted.  Names are unique among live tokens.
CREATE TABLE api_tokens (
    id             text PRIMARY KEY,
    tenant_id      text NOT NULL REFERENCES tenants (id),
    name           text NOT NULL,
    token_hash     text NOT NULL,
    workspace_id   text NOT NULL,
    env_public_id  text NOT NULL,
    scope          text NOT NULL CHECK (scope IN ('write', 'read')),
    created_at     timestamptz NOT NULL,
    last_used_at   timestamptz,
    revoked_at     timestamptz,
    CONSTRAINT api_tokens_hash UNIQUE (token_hash)
);

CREATE INDEX api_tokens_tenant ON api_tokens (tenant_id, created_at);
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (tenant_id, name)
    WHERE revoked_at IS NULL;

-- Every mutation appends an event in its own transaction, after locking the
-- tenant row (the chain head).  This check runs then, so it sees a deletion
-- that committed while the mutation waited: a state of a hosted tenant is
-- never written, locked or created after its tenant or environment is gone
-- (the request was let in by a token revoked with them).  SQLSTATE KL401 is
-- answered 401 by the store.
CREATE FUNCTION kilolock_event_owner_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    owner tenants%ROWTYPE;
BEGIN
    SELECT * INTO owner FROM tenants WHERE id = NEW.tenant_id;
    IF owner.slug IS NULL THEN
        RETURN NEW;
    END IF;
    IF owner.deleted_at IS NOT NULL AND NEW.kind <> 'tenant_delete' THEN
        RAISE EXCEPTION 'the tenant is deleted' USING ERRCODE = 'KL401';
    END IF;
    IF NEW.state_path IS NOT NULL AND NEW.kind <> 'state_delete' AND NOT EXISTS (
        SELECT 1 FROM environments e
        WHERE e.tenant_id = NEW.tenant_id
          AND e.workspace_id = split_part(NEW.state_path, '/', 1)
          AND e.id = split_part(NEW.state_path, '/', 2)
    ) THEN
        RAISE EXCEPTION 'the workspace or environment does not exist' USING ERRCODE = 'KL401';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER events_owner_check BEFORE INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION kilolock_event_owner_check();
