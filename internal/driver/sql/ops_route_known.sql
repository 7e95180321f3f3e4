-- Whether the database knows the route @route (an event type): an
-- operator's control of it, or a live or failed row of its type. Pausing a
-- route nobody knows is most likely a typo. (The routes file is checked by
-- the caller; the default route '*' is always known.)
-- Index: route_controls' primary key; the partial indexes on received,
-- processing and failed rows (their rows are read, never the processed
-- ones). Locks nothing.
SELECT EXISTS (SELECT 1 FROM route_controls WHERE route = @route::text)
    OR EXISTS (SELECT 1 FROM inbox WHERE status = 'processing' AND event_type = @route::text)
    OR EXISTS (SELECT 1 FROM inbox WHERE status = 'received' AND available_at > '-infinity' AND event_type = @route::text)
    OR EXISTS (SELECT 1 FROM inbox WHERE status IN ('dead', 'rejected') AND event_type = @route::text)
