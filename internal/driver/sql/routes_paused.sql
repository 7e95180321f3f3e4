-- The routes paused now, with who paused them, when and why: every
-- replica reads this about twice a second (a handful of rows, the primary
-- key's table).
SELECT route, coalesce(paused_by, ''), coalesce(reason, ''), paused_at
FROM route_controls
WHERE paused
ORDER BY route
