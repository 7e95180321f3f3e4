-- The outbox rows with event id @event_id, every column, oldest id first,
-- at most @limit, for `inboxd outbox show` given an event id. Event ids are
-- not unique: a writer may set its own, and give two rows one.
-- Index: none holds event_id, so this reads the table: an operator's
-- one-off look-up (the daemon never runs it). On a big table give the row
-- id instead (`inboxd outbox dead` lists it), which the primary key finds.
SELECT *
FROM outbox
WHERE event_id = @event_id::text
ORDER BY id
LIMIT @limit::int
