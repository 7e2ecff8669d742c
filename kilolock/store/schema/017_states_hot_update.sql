-- Kilolock schema version 17: a write's update of its state's row is a
-- heap-only tuple.
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- Every write sets its state's updated_at (and projection_digests).  With
-- updated_at indexed (states_tenant_updated, schema 4), PostgreSQL could
-- not update the row in place: each write added an entry to each of the
-- table's three indexes and left a dead row version for a VACUUM.  The only
-- reader of that index was the dashboard's listing sorted by update time,
-- which numbers and counts every matching state of the tenant anyway (its
-- page has an OFFSET and a total): without the index it sorts them, a
-- top-N sort of one tenant's states.  Without the index no column of an
-- index changes, so the new row version goes on the same page (a HOT
-- update) when the page has room, which page pruning keeps making.
DROP INDEX states_tenant_updated;
