-- Kilolock schema version 10: state at rest -- encrypted payloads, tombstones
-- of pruned and purged versions, retention policies, version holds, and the
-- admin token scope.
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- Encryption (kilolock.atrest.envelope): an encrypted version's payload is
-- sealed under a data key of its own, kept wrapped in data_key; kek_id names
-- the key-encryption key that wraps it (rotation finds the rows still to
-- rewrap by it, the start-up check probes one data key per id).  Both NULL:
-- the payload is not encrypted.
--
-- A tombstone is a version whose bytes are gone (pruned by retention, or
-- purged): codec 'pruned', no payload, no data key, no base; its number,
-- serial, sha256, size, author and created_at stay, with when and why
-- (pruned_at, prune_reason).  Its row stays, so history lists it, the
-- numbers of later versions do not move, and the audit events that name its
-- sha256 still name a version of the state.
ALTER TABLE state_versions
    ADD COLUMN data_key bytea,
    ADD COLUMN kek_id text,
    ADD COLUMN pruned_at timestamptz,
    ADD COLUMN prune_reason text,
    ALTER COLUMN payload DROP NOT NULL,
    DROP CONSTRAINT state_versions_codec,
    ADD CONSTRAINT state_versions_codec
        CHECK (codec IN ('identity', 'zstd', 'zstd-delta', 'pruned')),
    ADD CONSTRAINT state_versions_data_key CHECK ((data_key IS NULL) = (kek_id IS NULL)),
    ADD CONSTRAINT state_versions_tombstone CHECK (
        (codec = 'pruned') = (payload IS NULL)
        AND (codec = 'pruned') = (pruned_at IS NOT NULL)
        AND (codec <> 'pruned' OR data_key IS NULL));

-- Empty while encryption is off: costs nothing then.
CREATE INDEX state_versions_kek ON state_versions (kek_id) WHERE kek_id IS NOT NULL;

-- Retention policies that override the server's default: a tenant's own
-- default (path '') or one state's (its path; set before the state exists,
-- kept when it is deleted).  A row is a whole policy: keep the newest
-- keep_versions versions and every version younger than keep_days days
-- (NULL: no limit of that kind; both NULL: keep every version).
-- kilolock.retention.policy decides what a policy keeps.
CREATE TABLE retention_policies (
    tenant_id      text NOT NULL REFERENCES tenants (id),
    path           text NOT NULL,
    keep_versions  integer CHECK (keep_versions BETWEEN 1 AND 1000000),
    keep_days      integer CHECK (keep_days BETWEEN 1 AND 36500),
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, path)
);

-- Versions an operation in progress refers to (an upload session, a
-- server-side operation, a rollback): retention never prunes them while a
-- hold has not expired.  holder names the operation.
CREATE TABLE version_holds (
    state_id    bigint NOT NULL REFERENCES states (id) ON DELETE CASCADE,
    number      integer NOT NULL,
    holder      text NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (state_id, number, holder)
);

-- Admin tokens: write, and also purge versions and set retention.
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_scope_check;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_scope_check
    CHECK (scope IN ('write', 'read', 'outputs', 'admin'));

-- kl_write_state (006_write_path.sql) again, with the wrapped data key and
-- its KEK id of an encrypted payload (both NULL when not encrypted); a
-- delta's base must be a full snapshot that is still there.
DROP FUNCTION kl_write_state(text, text, text, integer, bigint, text, text, bigint,
                             timestamptz, text, boolean, integer, text, bytea, integer, text,
                             text[], text, text, text, text, text, text, text, text, text);

CREATE FUNCTION kl_write_state(
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
            AND b.number = p_base_number AND b.sha256 = p_base_sha256 AND b.codec = 'zstd') THEN
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
