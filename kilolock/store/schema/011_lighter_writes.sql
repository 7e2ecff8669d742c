-- Kilolock schema version 11: lighter writes.  The projection tables
-- (resources, resource_dependencies, outputs) without foreign keys, a
-- state's projection rows deleted with the state by a trigger instead; the
-- index of versions by sha256 a hash index; events without their unused id.
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- A foreign key checks every inserted row with a query of its own, locking
-- the state's and the version's rows: 100,000 checks for a state of 50,000
-- resources written with COPY (about a second of the write), one or two per
-- changed resource of a small write.  The projection rows are written only
-- by Kilolock's own write transactions, which hold the state's row and have
-- just inserted the version they name; nothing else inserts them.  What the
-- keys did besides checking -- deleting a state's rows with the state
-- (ON DELETE CASCADE) -- the trigger below does.  Versions are deleted only
-- with their state (retention and purges keep a tombstone row), so the
-- version keys had nothing else to do.
ALTER TABLE resources
    DROP CONSTRAINT resources_state_id_fkey,
    DROP CONSTRAINT resources_version_id_fkey;
ALTER TABLE resource_dependencies
    DROP CONSTRAINT resource_dependencies_state_id_fkey,
    DROP CONSTRAINT resource_dependencies_version_id_fkey;
ALTER TABLE outputs
    DROP CONSTRAINT outputs_state_id_fkey,
    DROP CONSTRAINT outputs_version_id_fkey;

-- Rows of states deleted earlier cannot exist (the keys cascaded until now).
CREATE FUNCTION kl_drop_projection_of_state() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM resources WHERE state_id = OLD.id;
    DELETE FROM resource_dependencies WHERE state_id = OLD.id;
    DELETE FROM outputs WHERE state_id = OLD.id;
    RETURN OLD;
END
$$;

CREATE TRIGGER states_drop_projection AFTER DELETE ON states
    FOR EACH ROW EXECUTE FUNCTION kl_drop_projection_of_state();

-- The index of versions by the SHA-256 of their bytes (GET
-- /v1/native/blobs) only answers equality: a hash index stores a 32-bit
-- hash of each 64-character key where a btree stores the key (about 140
-- bytes of index per version written, measured by bench/db_growth.py).
DROP INDEX state_versions_sha256;
CREATE INDEX state_versions_sha256 ON state_versions USING hash (sha256);

-- An event is identified by its tenant and its number in the tenant's chain
-- (every reader selects and orders by them; events_tenant_seq keeps them
-- unique); the id column was never read.  Dropping it drops its index (about
-- 75 bytes per version of three events) and 8 bytes of each new row.  The
-- unique index identifies a row for logical replication instead.
ALTER TABLE events DROP COLUMN id;
ALTER TABLE events REPLICA IDENTITY USING INDEX events_tenant_seq;
