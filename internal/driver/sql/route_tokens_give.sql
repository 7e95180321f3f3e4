-- Give back the tokens a claim was granted (sql/route_tokens_take.sql)
-- but did not use: it found fewer due rows of the route. A bucket never
-- holds more than its burst.
UPDATE route_tokens t
SET tokens = least(g.burst, t.tokens + g.tokens)
FROM unnest(@routes::text[], @bursts::float8[], @tokens::int[]) AS g(route, burst, tokens)
WHERE t.route = g.route AND g.tokens > 0
