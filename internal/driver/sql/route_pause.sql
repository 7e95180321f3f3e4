-- Pause a route on every replica: their claims leave its rows from their
-- next read of the paused routes (sql/routes_paused.sql) on. Pausing a
-- paused route keeps its first pauser and time, and updates the reason.
INSERT INTO route_controls (route, paused, paused_by, reason, paused_at)
VALUES (@route, true, @by, @reason, now())
ON CONFLICT (route) DO UPDATE
SET paused = true,
    paused_by = CASE WHEN route_controls.paused THEN route_controls.paused_by ELSE excluded.paused_by END,
    paused_at = CASE WHEN route_controls.paused THEN route_controls.paused_at ELSE excluded.paused_at END,
    reason = excluded.reason
