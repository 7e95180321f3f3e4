-- Whether the database knows the route @route (an event type): an
-- operator's control of it, an outcome of its rows in the last eight days
-- (the per-route rollup, migration 018), or a row of it processing now.
-- Pausing a route nobody knows is most likely a typo. (The routes file is
-- checked by the caller; the default route '*' is always known.) The inbox
-- itself is not searched by type: no index holds event_type, and an
-- unknown type would read every live row (2.7 s at p95 on 10M rows).
-- Index: route_controls' primary key; route_rollup read whole (a cell per
-- route and minute or hour: small); inbox_processing_idx. Locks nothing.
SELECT EXISTS (SELECT 1 FROM route_controls WHERE route = @route::text)
    OR EXISTS (SELECT 1 FROM route_rollup WHERE route = @route::text)
    OR EXISTS (SELECT 1 FROM inbox WHERE status = 'processing' AND event_type = @route::text)
