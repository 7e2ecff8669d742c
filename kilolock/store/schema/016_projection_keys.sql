-- Kilolock schema version 16: dependency and output rows keyed by their
-- state and their place in it, as resources are since version 14.
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- Readers select a state's dependency and output rows by state_id ORDER BY
-- ordinal, and every write replaces all of a state's rows of a table at
-- once (kl_write_state, or the large path's DROP_PROJECTION then COPY),
-- numbering them 1, 2, ...: so (state_id, ordinal) is unique, and as the
-- key it serves the readers alone.  The key by (version_id, ordinal) and
-- the index by state_id were two indexes to fill for every row: copying the
-- 50,000 dependency rows of the 120 MB benchmark state took 0.091-0.102 s
-- with both and 0.057-0.072 s with the one key (embedded PostgreSQL, the
-- 2-core machine of docs/performance.md).  Building each key reads its
-- table once.
ALTER TABLE resource_dependencies DROP CONSTRAINT resource_dependencies_pkey;
ALTER TABLE resource_dependencies
    ADD CONSTRAINT resource_dependencies_pkey PRIMARY KEY (state_id, ordinal);
DROP INDEX resource_dependencies_state;

ALTER TABLE outputs DROP CONSTRAINT outputs_pkey;
ALTER TABLE outputs ADD CONSTRAINT outputs_pkey PRIMARY KEY (state_id, ordinal);
DROP INDEX outputs_state;
