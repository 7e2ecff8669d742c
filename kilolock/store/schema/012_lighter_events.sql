-- Kilolock schema version 12: lighter audit events.  A new event stores its
-- hash as 32 bytes instead of 64 hex characters, does not store its
-- prev_hash (the hash of the event before it in the tenant's chain: read
-- from there), a write's sha256 as 32 bytes, and its lock ID as a uuid (16
-- bytes instead of 37 characters) when it is one in its canonical lowercase
-- form, as Terraform's and OpenTofu's lock IDs are: 118 bytes less per lock
-- event, 150 per write (measured by bench/db_growth.py).
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- Events written before this version keep their row exactly as stored (no
-- rewrite): prev_hash and hash as text, and they are read and verified by
-- that text (an altered one, even in letter case only, still fails
-- kilolock.core.audit.verify_chain).  A new event has hash_bytes instead, and
-- neither text column; its sha256 is sha256_bytes when it is 64 lowercase hex
-- digits (every state's is), the text otherwise; its lock ID is lock_uuid
-- when it is a lowercase UUID (uuid::text prints exactly that text back),
-- lock_id otherwise.  Every reader selects
-- kilolock.store.postgres.rows.EVENT_COLUMNS (or EVENT_COLUMNS_LIMITED),
-- which yields the same text for both forms.
--
-- The checks are NOT VALID: no existing row is scanned (the upgrade is
-- instant whatever the length of the history), and every existing row
-- satisfies them (hash and prev_hash were NOT NULL, the new columns are
-- empty); every row inserted or updated from now on is checked.
ALTER TABLE events
    ALTER COLUMN prev_hash DROP NOT NULL,
    ALTER COLUMN hash DROP NOT NULL,
    ADD COLUMN hash_bytes bytea,
    ADD COLUMN sha256_bytes bytea,
    ADD COLUMN lock_uuid uuid,
    ADD CONSTRAINT events_hash_form CHECK (CASE WHEN hash_bytes IS NULL
        THEN hash IS NOT NULL AND prev_hash IS NOT NULL
        ELSE hash IS NULL AND prev_hash IS NULL AND octet_length(hash_bytes) = 32 END)
        NOT VALID,
    ADD CONSTRAINT events_sha256_form CHECK (
        sha256_bytes IS NULL OR (sha256 IS NULL AND octet_length(sha256_bytes) = 32))
        NOT VALID,
    ADD CONSTRAINT events_lock_id_form CHECK (lock_uuid IS NULL OR lock_id IS NULL) NOT VALID;

-- kl_append_event as in 006_write_path.sql (same signature, same lock order,
-- same hash: kilolock.core.audit.event_hash), inserting the new form.  It still
-- returns the event's prev_hash and hash as lowercase hex text.
CREATE OR REPLACE FUNCTION kl_append_event(
    p_tenant text, p_kind text, p_path text, p_principal text, p_at timestamptz,
    p_lock_id text, p_serial bigint, p_sha256 text, p_detail text, p_prefix text,
    p_suffix text, OUT event_seq integer, OUT event_prev text, OUT event_hash text)
LANGUAGE plpgsql AS $$
DECLARE
    v_hash bytea;
    v_sha256_bytes boolean := p_sha256 ~ '^[0-9a-f]{64}$';
    v_lock_uuid boolean :=
        p_lock_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';
BEGIN
    SELECT t.chain_seq + 1, t.chain_head INTO event_seq, event_prev
    FROM tenants t WHERE t.id = p_tenant FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_hash := sha256(convert_to(event_prev || p_prefix || event_seq || p_suffix, 'UTF8'));
    event_hash := encode(v_hash, 'hex');
    INSERT INTO events (tenant_id, seq, kind, state_path, principal, at, lock_id, lock_uuid,
                        serial, sha256, sha256_bytes, detail, hash_bytes)
    VALUES (p_tenant, event_seq, p_kind, p_path, p_principal, p_at,
            CASE WHEN v_lock_uuid THEN NULL ELSE p_lock_id END,
            CASE WHEN v_lock_uuid THEN p_lock_id::uuid END, p_serial,
            CASE WHEN v_sha256_bytes THEN NULL ELSE p_sha256 END,
            CASE WHEN v_sha256_bytes THEN decode(p_sha256, 'hex') END, p_detail, v_hash);
    UPDATE tenants SET chain_seq = event_seq, chain_head = event_hash WHERE id = p_tenant;
END
$$;
