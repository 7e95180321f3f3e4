-- Make the buckets of rate-limited routes that have none yet, full (their
-- burst). A bucket that exists is left as it is.
INSERT INTO route_tokens (route, tokens, refilled_at)
SELECT route, burst, now()
FROM unnest(@routes::text[], @bursts::float8[]) AS b(route, burst)
ON CONFLICT (route) DO NOTHING
