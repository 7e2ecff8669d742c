-- Kilolock schema version 13: the events' time index as a BRIN index.
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- Only list_events' time range (since / until: the native and control
-- APIs' events, kl events) reads events by `at`.  Events are appended in
-- time order and never updated or deleted, so the heap is in `at` order and
-- a BRIN index -- the least and greatest `at` of every 32 pages -- finds a
-- range's pages as well as the btree of every (tenant_id, at) did (about 30
-- bytes per event, 90 per write cycle; the BRIN index is a few pages for
-- millions of events).  The tenant is filtered on the pages found.  A row
-- out of order only widens its range's bounds: answers stay exact.
DROP INDEX events_tenant_at;
CREATE INDEX events_at ON events USING brin (at) WITH (pages_per_range = 32);
