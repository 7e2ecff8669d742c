-- Kilolock schema version 8: a resource type of any length can be stored.
--
-- A btree index entry holds at most about 2.7 kB, so a state with a longer
-- resource type (a few kB of incompressible text) failed to write with
-- "index row size exceeds maximum".  Terraform may write any resource type,
-- and the index only answers equality (the native API's ?type= search), so
-- a hash index, which stores a 32-bit hash of each value whatever its
-- length, serves the same queries with no limit on the value.
DROP INDEX IF EXISTS resources_type;
CREATE INDEX resources_type ON resources USING hash (type);
