-- Kilolock schema version 15: the index of resources by type as a btree of
-- the type's hash.
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- A hash index keeps every row of one type in one bucket: a chain of
-- overflow pages that each insert walks to its end, so inserting n rows of
-- a type already held m times costs in proportion to n * (m + n).  Types
-- repeat (a fleet holds thousands of aws_instance rows): measured on the
-- 2-core machine of docs/performance.md, copying 50,000 resources of one
-- type took 0.77, 1.14, 1.69, 2.41 s as the table grew by 50,000 rows of
-- that type each time, against 0.45 s without the index.  A btree of
-- hashtext(type) (PostgreSQL's own hash of the text: 4 bytes, immutable)
-- keeps a type's rows as one deduplicated posting list, found in
-- logarithmic time: 0.48-0.55 s for the same copies.  Like the hash index
-- it stores a fixed 4 bytes whatever the length of the type (a btree of the
-- type itself cannot hold an entry over ~2.7 kB), and answers equality
-- only: a search compares hashtext(type) and then the type itself
-- (kilolock.store.postgres.statements.select_matches), so two types with
-- the same hash are never confused.  Building it reads the table once.
DROP INDEX resources_type;
CREATE INDEX resources_type ON resources (hashtext(type));
