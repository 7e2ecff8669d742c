-- Kilolock schema version 14: an event's lock ID as a uuid (16 bytes
-- instead of 37 characters of text) when it is one in its canonical
-- lowercase form, as Terraform's and OpenTofu's lock IDs are: 21 bytes
-- less for each lock, write and release event (63 per write cycle).
--
-- Applied by kilolock.store.schema.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- lock_uuid::text is exactly the text it was made from (PostgreSQL prints a
-- uuid in that form), so every reader's coalesce(lock_id, lock_uuid::text)
-- (kilolock.store.postgres.rows.EVENT_COLUMNS) yields the lock ID as sent,
-- and the event's hash, computed over that text, verifies.  Any other lock
-- ID (capitals, another shape) stays text.  Events written before keep
-- their row as stored; the check is NOT VALID for the reason given in
-- 012_lighter_events.sql (every existing row has no lock_uuid).
ALTER TABLE events
    ADD COLUMN lock_uuid uuid,
    ADD CONSTRAINT events_lock_id_form CHECK (lock_uuid IS NULL OR lock_id IS NULL) NOT VALID;

-- kl_append_event as in 012_lighter_events.sql, storing the lock ID so.
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
