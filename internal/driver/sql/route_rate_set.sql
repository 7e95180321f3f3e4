-- Override a route's rate limit on every replica (rate rows a second,
-- burst NULL: one second's worth), until route_rate_clear.sql; its pause
-- and breaker reset are left as they are.
INSERT INTO route_controls (route, rate, burst, rate_by, rate_at)
VALUES (@route, @rate, @burst, @by, now())
ON CONFLICT (route) DO UPDATE
SET rate = excluded.rate, burst = excluded.burst, rate_by = excluded.rate_by, rate_at = excluded.rate_at
