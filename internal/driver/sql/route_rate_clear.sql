-- Clear a route's rate override: every replica goes back to the routes
-- file's rate (none if it has none). Returns the route when it had one.
UPDATE route_controls
SET rate = NULL, burst = NULL, rate_by = NULL, rate_at = NULL
WHERE route = @route AND rate IS NOT NULL
RETURNING route
