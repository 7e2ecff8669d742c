-- Kilolock schema version 6: compressed versions, and the state lane's
-- mutations as server-side functions (one round trip each).
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- A version's bytes are stored as a payload in one of three codecs
-- (kilolock.atrest.compression): 'identity' (the raw bytes: every row written
-- before this version), 'zstd' (a full snapshot) or 'zstd-delta' (zstd with
-- the raw bytes of a full snapshot of the same state, base_number, as
-- prefix).  sha256 and size stay those of the raw bytes: every decode is
-- checked against them.  The payload is already compressed: EXTERNAL storage
-- keeps PostgreSQL from trying pglz on it (older rows keep theirs).
ALTER TABLE state_versions RENAME COLUMN raw_state TO payload;
ALTER TABLE state_versions
    ADD COLUMN codec text NOT NULL DEFAULT 'identity',
    ADD COLUMN base_number integer,
    ADD CONSTRAINT state_versions_codec CHECK (codec IN ('identity', 'zstd', 'zstd-delta')),
    ADD CONSTRAINT state_versions_delta_base
        CHECK ((codec = 'zstd-delta') = (base_number IS NOT NULL)),
    -- A delta's base snapshot outlives it.
    ADD CONSTRAINT state_versions_base FOREIGN KEY (state_id, base_number)
        REFERENCES state_versions (state_id, number);
ALTER TABLE state_versions ALTER COLUMN payload SET STORAGE EXTERNAL;
CREATE INDEX state_versions_base ON state_versions (state_id, base_number)
    WHERE base_number IS NOT NULL;

-- The lock order of every transaction that changes a tenant's states:
--
--     the state row -> its lock row -> its versions and projection rows
--     -> the tenant's chain head (last, followed by the COMMIT)
--
-- A transaction holding the chain head never waits for anything else, so no
-- cycle of waits can include it, and the rows before it belong to one state.
-- The chain head is locked by kl_append_event's first statement and updated
-- by a later one: each statement of a function takes a fresh snapshot, so
-- the update finds the row version it locked (a single statement that locks
-- the head and updates it from its older snapshot chases the row's newer
-- versions and can deadlock with other appenders on their tuple locks).

-- Append an event to the tenant's hash chain (kilolock.core.audit.event_hash: the
-- SHA-256 of prev_hash || prefix || seq || suffix).  Returns NULLs when the
-- tenant does not exist.
CREATE FUNCTION kl_append_event(
    p_tenant text, p_kind text, p_path text, p_principal text, p_at timestamptz,
    p_lock_id text, p_serial bigint, p_sha256 text, p_detail text, p_prefix text,
    p_suffix text, OUT event_seq integer, OUT event_prev text, OUT event_hash text)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT t.chain_seq + 1, t.chain_head INTO event_seq, event_prev
    FROM tenants t WHERE t.id = p_tenant FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    event_hash := encode(sha256(convert_to(event_prev || p_prefix || event_seq || p_suffix,
                                           'UTF8')), 'hex');
    INSERT INTO events (tenant_id, seq, kind, state_path, principal, at, lock_id, serial,
                        sha256, detail, prev_hash, hash)
    VALUES (p_tenant, event_seq, p_kind, p_path, p_principal, p_at, p_lock_id, p_serial,
            p_sha256, p_detail, event_prev, event_hash);
    UPDATE tenants SET chain_seq = event_seq, chain_head = event_hash WHERE id = p_tenant;
END
$$;

-- A state's row, and its tenant's, when missing.  The tenant is looked up
-- first: an INSERT ... ON CONFLICT would wait for every transaction that has
-- just moved the tenant's chain head.
CREATE FUNCTION kl_create_state(p_tenant text, p_path text, p_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tenants WHERE id = p_tenant) THEN
        INSERT INTO tenants (id) VALUES (p_tenant) ON CONFLICT (id) DO NOTHING;
    END IF;
    INSERT INTO states (tenant_id, path, created_at, updated_at)
    VALUES (p_tenant, p_path, p_at, p_at) ON CONFLICT (tenant_id, path) DO NOTHING;
END
$$;

-- LOCK: take the lock when nobody holds it (creating the state's row first
-- when needed) and append its event; else return the holder's ID and info,
-- for kilolock.rules.locks.decide_lock.  taken is NULL when the lock kept
-- changing hands.
CREATE FUNCTION kl_lock(
    p_tenant text, p_path text, p_lock_id text, p_info bytea, p_at timestamptz,
    p_principal text, p_kind text, p_detail text, p_prefix text, p_suffix text,
    p_token_digest text,
    OUT taken boolean, OUT holder_id text, OUT holder_info bytea)
LANGUAGE plpgsql AS $$
DECLARE
    v_state bigint;
BEGIN
    FOR attempt IN 1..10 LOOP
        INSERT INTO locks (state_id, lock_id, info, acquired_at, principal, token_digest)
        SELECT s.id, p_lock_id, p_info, p_at, p_principal, p_token_digest FROM states s
        WHERE s.tenant_id = p_tenant AND s.path = p_path
        ON CONFLICT (state_id) DO NOTHING
        RETURNING state_id INTO v_state;
        IF v_state IS NOT NULL THEN
            PERFORM kl_append_event(p_tenant, p_kind, p_path, p_principal, p_at, p_lock_id,
                                    NULL, NULL, p_detail, p_prefix, p_suffix);
            taken := true;
            RETURN;
        END IF;
        SELECT s.id, l.lock_id, l.info INTO v_state, holder_id, holder_info
        FROM states s LEFT JOIN locks l ON l.state_id = s.id
        WHERE s.tenant_id = p_tenant AND s.path = p_path;
        IF holder_id IS NOT NULL THEN
            taken := false;
            RETURN;
        END IF;
        IF v_state IS NULL THEN
            PERFORM kl_create_state(p_tenant, p_path, p_at);
        END IF;
    END LOOP;
END
$$;

-- UNLOCK: release the lock p_lock_id holds with exactly the info p_info
-- and append its event (p_kind, p_detail: what kilolock.rules.locks decided
-- for that holder); else (nothing released) return who holds the lock now,
-- for kilolock.rules.locks.decide_unlock.
CREATE FUNCTION kl_unlock(
    p_tenant text, p_path text, p_lock_id text, p_info bytea, p_at timestamptz,
    p_principal text, p_kind text, p_detail text, p_prefix text, p_suffix text,
    OUT released boolean, OUT holder_info bytea, OUT acquired_at timestamptz,
    OUT holder_principal text, OUT holder_token_digest text)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_lock_id IS NOT NULL AND p_info IS NOT NULL THEN
        DELETE FROM locks l USING states s
        WHERE l.state_id = s.id AND s.tenant_id = p_tenant AND s.path = p_path
          AND l.lock_id = p_lock_id AND l.info = p_info
        RETURNING l.info, l.acquired_at, l.principal, l.token_digest
        INTO holder_info, acquired_at, holder_principal, holder_token_digest;
        IF FOUND THEN
            PERFORM kl_append_event(p_tenant, p_kind, p_path, p_principal, p_at, p_lock_id,
                                    NULL, NULL, p_detail, p_prefix, p_suffix);
            released := true;
            RETURN;
        END IF;
    END IF;
    released := false;
    SELECT l.info, l.acquired_at, l.principal, l.token_digest
    INTO holder_info, acquired_at, holder_principal, holder_token_digest
    FROM locks l JOIN states s ON s.id = l.state_id
    WHERE s.tenant_id = p_tenant AND s.path = p_path;
END
$$;

-- A write (POST) of a state smaller than the large-transfer threshold, in
-- one statement.  The state's row is locked (created first when missing),
-- then its lock row (FOR SHARE: an UNLOCK waits for the write).
--
-- With p_number NULL the version is written when the request's lock ID is
-- the holder's (both NULL included) and no stored version has p_serial:
-- kilolock.rules.locks then always answers "next version" (see
-- state_rules.is_plain_write).  With p_number set (the number the rules
-- chose from facts returned earlier) it is written when that holder still
-- holds the lock and p_number is still the next number.  Otherwise nothing
-- is written and the facts come back (outcome 'facts': the holder, and the
-- versions with p_serial plus the current one, oldest first; one row of
-- NULL version columns when there is none).  A delta whose base snapshot is
-- not there (outcome 'no base') is not written either.
--
-- The projection's tables are replaced only where their digest changed (the
-- resources row by row).  The
-- event's detail names the new version's number, known only here: detail and
-- hash prefix come in two parts each, around it
-- (kilolock.store.postgres.events.numbered_event_parameters).
CREATE FUNCTION kl_write_state(
    p_tenant text, p_path text, p_lock_id text, p_number integer, p_serial bigint,
    p_lineage text, p_sha256 text, p_size bigint, p_at timestamptz, p_principal text,
    p_projected boolean, p_resource_count integer, p_codec text, p_payload bytea,
    p_base_number integer, p_base_sha256 text, p_digests text[], p_resources text,
    p_dependencies text, p_outputs text, p_kind text, p_detail_head text,
    p_detail_tail text, p_prefix_head text, p_prefix_tail text, p_suffix text)
RETURNS TABLE (outcome text, lock_id text, lock_info bytea, number integer, serial bigint,
               lineage text, sha256 text, size bigint, created_at timestamptz,
               principal text, projected boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_state bigint;
    v_digests text[];
    v_holder text;
    v_info bytea;
    v_current integer;
    v_number integer;
    v_id bigint;
BEGIN
    SELECT s.id, s.projection_digests INTO v_state, v_digests FROM states s
    WHERE s.tenant_id = p_tenant AND s.path = p_path FOR UPDATE;
    IF NOT FOUND THEN
        IF p_lock_id IS NOT NULL THEN
            -- No state, so no lock: the facts, and nothing created.
            RETURN QUERY SELECT 'facts'::text, NULL::text, NULL::bytea, NULL::integer,
                NULL::bigint, NULL::text, NULL::text, NULL::bigint, NULL::timestamptz,
                NULL::text, NULL::boolean;
            RETURN;
        END IF;
        PERFORM kl_create_state(p_tenant, p_path, p_at);
        SELECT s.id, s.projection_digests INTO v_state, v_digests FROM states s
        WHERE s.tenant_id = p_tenant AND s.path = p_path FOR UPDATE;
    END IF;
    SELECT l.lock_id, l.info INTO v_holder, v_info FROM locks l
    WHERE l.state_id = v_state FOR SHARE;
    SELECT max(v.number) INTO v_current FROM state_versions v WHERE v.state_id = v_state;
    IF v_holder IS DISTINCT FROM p_lock_id
       OR (p_number IS NULL AND EXISTS (
               SELECT 1 FROM state_versions v WHERE v.state_id = v_state
               AND v.serial = p_serial))
       OR (p_number IS NOT NULL AND p_number <> coalesce(v_current, 0) + 1) THEN
        RETURN QUERY
            SELECT 'facts'::text, v_holder, v_info, v.number, v.serial, v.lineage,
                   v.sha256, v.size, v.created_at, v.principal, v.projected
            FROM (SELECT 1) AS one
            LEFT JOIN state_versions v ON v.state_id = v_state
                 AND (v.serial = p_serial OR v.number = v_current)
            ORDER BY v.number;
        RETURN;
    END IF;
    IF p_codec = 'zstd-delta' AND NOT EXISTS (
            SELECT 1 FROM state_versions b WHERE b.state_id = v_state
            AND b.number = p_base_number AND b.sha256 = p_base_sha256 AND b.codec = 'zstd') THEN
        RETURN QUERY SELECT 'no base'::text, NULL::text, NULL::bytea, NULL::integer,
            NULL::bigint, NULL::text, NULL::text, NULL::bigint, NULL::timestamptz,
            NULL::text, NULL::boolean;
        RETURN;
    END IF;
    v_number := coalesce(v_current, 0) + 1;
    INSERT INTO state_versions (state_id, number, serial, lineage, sha256, size, payload,
                                codec, base_number, created_at, principal, projected,
                                resource_count)
    VALUES (v_state, v_number, p_serial, p_lineage, p_sha256, p_size, p_payload, p_codec,
            p_base_number, p_at, p_principal, p_projected, p_resource_count)
    RETURNING id INTO v_id;
    IF v_digests IS NULL OR v_digests[1] IS DISTINCT FROM p_digests[1] THEN
        -- Row by row: a resource row identical to the new one at its
        -- ordinal stays (Terraform rewrites every resource on every apply,
        -- usually changing few: no dead rows for the others).
        WITH incoming AS (
            SELECT r.* FROM ROWS FROM (jsonb_to_recordset(p_resources::jsonb) AS (
                address text, module text, mode text, type text, name text, provider text,
                index_key jsonb, deposed text, attributes jsonb
            )) WITH ORDINALITY AS r (address, module, mode, type, name, provider, index_key,
                                     deposed, attributes, ordinal)
        ), gone AS (
            DELETE FROM resources r WHERE r.state_id = v_state AND NOT EXISTS (
                SELECT 1 FROM incoming i WHERE i.ordinal = r.ordinal
                AND i.address = r.address AND i.module = r.module AND i.mode = r.mode
                AND i.type = r.type AND i.name = r.name AND i.provider = r.provider
                AND i.index_key IS NOT DISTINCT FROM r.index_key
                AND i.deposed IS NOT DISTINCT FROM r.deposed AND i.attributes = r.attributes)
        )
        INSERT INTO resources (state_id, version_id, ordinal, address, module, mode, type,
                               name, provider, index_key, deposed, attributes)
        SELECT v_state, v_id, i.ordinal, i.address, i.module, i.mode, i.type, i.name,
               i.provider, i.index_key, i.deposed, i.attributes
        FROM incoming i WHERE NOT EXISTS (
            SELECT 1 FROM resources r WHERE r.state_id = v_state AND r.ordinal = i.ordinal
            AND i.address = r.address AND i.module = r.module AND i.mode = r.mode
            AND i.type = r.type AND i.name = r.name AND i.provider = r.provider
            AND i.index_key IS NOT DISTINCT FROM r.index_key
            AND i.deposed IS NOT DISTINCT FROM r.deposed AND i.attributes = r.attributes);
    END IF;
    IF v_digests IS NULL OR v_digests[2] IS DISTINCT FROM p_digests[2] THEN
        DELETE FROM resource_dependencies d WHERE d.state_id = v_state;
        INSERT INTO resource_dependencies (state_id, version_id, ordinal, address, depends_on)
        SELECT v_state, v_id, d.ordinal, d.address, d.depends_on
        FROM ROWS FROM (jsonb_to_recordset(p_dependencies::jsonb) AS (
            address text, depends_on text
        )) WITH ORDINALITY AS d (address, depends_on, ordinal);
    END IF;
    IF v_digests IS NULL OR v_digests[3] IS DISTINCT FROM p_digests[3] THEN
        DELETE FROM outputs o WHERE o.state_id = v_state;
        INSERT INTO outputs (state_id, version_id, ordinal, name, type, value, sensitive)
        SELECT v_state, v_id, o.ordinal, o.name, o.type::jsonb, o.value::jsonb, o.sensitive
        FROM ROWS FROM (jsonb_to_recordset(p_outputs::jsonb) AS (
            name text, type text, value text, sensitive boolean
        )) WITH ORDINALITY AS o (name, type, value, sensitive, ordinal);
    END IF;
    UPDATE states s SET updated_at = p_at, projection_digests = p_digests
    WHERE s.id = v_state;
    PERFORM kl_append_event(p_tenant, p_kind, p_path, p_principal, p_at, p_lock_id, p_serial,
                            p_sha256, p_detail_head || v_number || p_detail_tail,
                            p_prefix_head || v_number || p_prefix_tail, p_suffix);
    RETURN QUERY SELECT 'written'::text, v_holder, NULL::bytea, v_number, p_serial,
        p_lineage, p_sha256, p_size, p_at, p_principal, p_projected;
END
$$;
