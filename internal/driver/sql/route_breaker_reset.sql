-- Reset a route's circuit breaker: every replica whose breaker is open or
-- half-open closes it once, when it reads a reset newer than the last it
-- saw. Returns the reset's time.
INSERT INTO route_controls (route, breaker_reset_by, breaker_reset_at)
VALUES (@route, @by, clock_timestamp())
ON CONFLICT (route) DO UPDATE
SET breaker_reset_by = excluded.breaker_reset_by, breaker_reset_at = excluded.breaker_reset_at
RETURNING breaker_reset_at
