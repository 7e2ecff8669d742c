-- Kilolock schema version 19: the chunks of an upload session are sealed as
-- versions are, and go once their session is committed.
--
-- Applied by kilolock.store.schema.upgrade.ensure_schema(); never edit a released
-- file: add the next numbered one.

-- With encryption on, a chunk's data is sealed (kilolock.atrest.chunks)
-- under a data key of its own, kept wrapped in data_key; kek_id names the
-- key-encryption key that wraps it (rotate-keys finds the chunks still to
-- rewrap by it).  Both NULL: the chunk is kept as it came (encryption off,
-- or received before it was turned on).
ALTER TABLE upload_chunks
    ADD COLUMN data_key bytea,
    ADD COLUMN kek_id text,
    ADD CONSTRAINT upload_chunks_data_key CHECK ((data_key IS NULL) = (kek_id IS NULL));

-- A committed session keeps its row (and the version it became) until it
-- expires, and no chunk row: committing deletes them.  Until now their data
-- was emptied and the rows kept.
DELETE FROM upload_chunks c USING upload_sessions s
WHERE s.id = c.session_id AND s.committed_version IS NOT NULL;
