-- Take tokens from the buckets of rate-limited routes, one bucket per
-- route for the whole fleet (route_tokens, by its primary key): each
-- bucket is refilled by its rate times the time since its last refill,
-- capped at its burst; the claim is granted min(want, floor(tokens)),
-- which is subtracted. Returns each route found with its grant (a route
-- without a bucket yet is not returned: sql/route_tokens_init.sql makes
-- it).
--
-- The buckets are locked (in route order, so that claimers never
-- deadlock) before the refill is computed: under READ COMMITTED a claimer
-- that waited for another's lock computes from the row that one wrote, so
-- no token is granted twice. A replica's clock does not matter: every
-- time is the database's, and a refill never goes back in time.
WITH want AS (
    SELECT * FROM unnest(@routes::text[], @rates::float8[], @bursts::float8[], @wants::int[])
        AS w(route, rate, burst, want)
), bucket AS (
    SELECT t.route, w.want,
           least(w.burst, t.tokens + w.rate * greatest(0, extract(epoch FROM now() - t.refilled_at))) AS tokens
    FROM route_tokens t
    JOIN want w ON w.route = t.route
    ORDER BY t.route
    FOR UPDATE OF t
)
UPDATE route_tokens t
SET tokens = b.tokens - least(b.want, floor(b.tokens)),
    refilled_at = greatest(t.refilled_at, now())
FROM bucket b
WHERE t.route = b.route
RETURNING t.route, least(b.want, floor(b.tokens))::int
