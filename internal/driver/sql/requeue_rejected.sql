-- Give a rejected row the event id and type its message maps to now and
-- hand it to the workers (status received, attempts reset, due now, no
-- lease: sql/requeue_set.sql). last_error is kept. Fails with
-- unique_violation (23505) when (source, event_id) is already taken: the
-- event arrived again meanwhile (driver.ErrEventTaken).
-- Index: the primary key (and the unique (source, event_id) index checks
-- the new event id).
UPDATE inbox
SET event_id = @event_id, event_type = @event_type, {{template "requeue_set"}}
WHERE id = @id AND status = 'rejected'
