-- Kilolock schema version 18: a delta's base may be a delta itself (chains).
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- A version is now usually a delta against the version before it, the next
-- link of a chain that starts at a full snapshot (kilolock.atrest.compression:
-- a read decodes the chain, at most 64 payloads); rows written before keep
-- their deltas against a snapshot, which are chains of one link.
-- base_number names the version whose raw bytes are the delta's prefix, as
-- before.
--
-- The foreign key state_versions_base and its index go.  The key only ever
-- refused the deletion of a base row, and Kilolock deletes version rows only
-- with their state (all of them); a write checks its base under the state's
-- row lock (below), and retention and purges re-encode the versions decoded
-- against a version before its bytes go.  The index cost 25 bytes per
-- version while deltas shared their snapshot's number (one deduplicated
-- posting list); with chains every base number differs: 49 bytes per version
-- (bench/db_growth.py), and an entry and a key check on every insert.  The
-- purge finds the versions decoded against one among the versions after it
-- (state_versions_number).
ALTER TABLE state_versions DROP CONSTRAINT state_versions_base;
DROP INDEX state_versions_base;

-- kl_write_state as in 014_hot_projection.sql (same signature, same checks
-- and lock order), accepting a delta (not only a full snapshot) as a base:
-- the base must still be there with its bytes, not a tombstone.
CREATE OR REPLACE FUNCTION kl_write_state(
    p_tenant text, p_path text, p_lock_id text, p_number integer, p_serial bigint,
    p_lineage text, p_sha256 text, p_size bigint, p_at timestamptz, p_principal text,
    p_projected boolean, p_resource_count integer, p_codec text, p_payload bytea,
    p_data_key bytea, p_kek_id text,
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
            AND b.number = p_base_number AND b.sha256 = p_base_sha256
            AND b.codec IN ('zstd', 'zstd-delta')) THEN
        RETURN QUERY SELECT 'no base'::text, NULL::text, NULL::bytea, NULL::integer,
            NULL::bigint, NULL::text, NULL::text, NULL::bigint, NULL::timestamptz,
            NULL::text, NULL::boolean;
        RETURN;
    END IF;
    v_number := coalesce(v_current, 0) + 1;
    INSERT INTO state_versions (state_id, number, serial, lineage, sha256, size, payload,
                                codec, data_key, kek_id, base_number, created_at, principal,
                                projected, resource_count)
    VALUES (v_state, v_number, p_serial, p_lineage, p_sha256, p_size, p_payload, p_codec,
            p_data_key, p_kek_id, p_base_number, p_at, p_principal, p_projected,
            p_resource_count)
    RETURNING id INTO v_id;
    IF v_digests IS NULL OR v_digests[1] IS DISTINCT FROM p_digests[1] THEN
        -- Row by row, in place: a resource row identical to the new one at
        -- its ordinal stays (Terraform rewrites every resource on every
        -- apply, usually changing few), a changed one is updated where it
        -- is, new ordinals are inserted and ordinals past the new count
        -- deleted.  One statement: every part sees the rows as they were
        -- before it, and touches ordinals the others do not.
        WITH incoming AS (
            SELECT r.* FROM ROWS FROM (jsonb_to_recordset(p_resources::jsonb) AS (
                address text, module text, mode text, type text, name text, provider text,
                index_key jsonb, deposed text, attributes jsonb
            )) WITH ORDINALITY AS r (address, module, mode, type, name, provider, index_key,
                                     deposed, attributes, ordinal)
        ), changed AS (
            UPDATE resources r SET version_id = v_id, address = i.address,
                module = i.module, mode = i.mode, type = i.type, name = i.name,
                provider = i.provider, index_key = i.index_key, deposed = i.deposed,
                attributes = i.attributes
            FROM incoming i
            WHERE r.state_id = v_state AND r.ordinal = i.ordinal
            AND (r.address, r.module, r.mode, r.type, r.name, r.provider, r.index_key,
                 r.deposed, r.attributes)
                IS DISTINCT FROM (i.address, i.module, i.mode, i.type, i.name, i.provider,
                                  i.index_key, i.deposed, i.attributes)
        ), gone AS (
            DELETE FROM resources r WHERE r.state_id = v_state
            AND r.ordinal > (SELECT count(*) FROM incoming)
        )
        INSERT INTO resources (state_id, version_id, ordinal, address, module, mode, type,
                               name, provider, index_key, deposed, attributes)
        SELECT v_state, v_id, i.ordinal, i.address, i.module, i.mode, i.type, i.name,
               i.provider, i.index_key, i.deposed, i.attributes
        FROM incoming i WHERE NOT EXISTS (
            SELECT 1 FROM resources r WHERE r.state_id = v_state AND r.ordinal = i.ordinal);
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
