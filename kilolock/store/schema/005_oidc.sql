-- Kilolock schema version 5: CI identity (OIDC tokens of GitHub Actions,
-- GitLab CI and other issuers).
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- The SHA-256 (hex) of the OIDC token that took a lock; NULL for every other
-- credential.  An expired CI token may still write and unlock the lock it
-- took (the lock grace, kilolock.auth.oidc.grace): this is how it is recognised.
-- The token itself is never stored.
ALTER TABLE locks ADD COLUMN token_digest text;

-- One hosted tenant's OIDC policy: its trusted issuers and rules, as the
-- canonical JSON text of the validated document (kilolock.auth.oidc.validation),
-- set and read through the control API.  No row: the tenant accepts no OIDC
-- token.  The row outlives a deleted tenant (whose tokens are refused anyway).
CREATE TABLE oidc_policies (
    tenant_id   text PRIMARY KEY REFERENCES tenants (id),
    document    text NOT NULL,
    updated_at  timestamptz NOT NULL
);
