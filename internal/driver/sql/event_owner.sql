-- The row that holds (source, event_id), and its status: which row a
-- re-mapped rejected row duplicates.
-- Index: inbox_source_event_id_key, the unique (source, event_id) index.
SELECT id, status
FROM inbox
WHERE source = @source AND event_id = @event_id
