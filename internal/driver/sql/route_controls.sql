-- Every route's controls: its pause, its rate override and its last
-- breaker reset, with who set each and when. Every replica's controls
-- reader reads this about twice a second (a handful of rows, the primary
-- key's table); the console and `inboxd route list` show it.
SELECT route, paused, coalesce(paused_by, ''), coalesce(reason, ''), paused_at,
       coalesce(rate, 0), coalesce(burst, 0), coalesce(rate_by, ''), rate_at,
       coalesce(breaker_reset_by, ''), breaker_reset_at
FROM route_controls
ORDER BY route
