-- Resume a paused route. Returns the route when it was paused.
UPDATE route_controls
SET paused = false, paused_by = NULL, reason = NULL, paused_at = NULL
WHERE route = @route AND paused
RETURNING route
