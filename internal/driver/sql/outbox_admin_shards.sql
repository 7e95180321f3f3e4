-- `inboxd outbox stats`: the 32 shards of outbox_shards by the relay that
-- holds them now, with the earliest and the latest end of its leases; one
-- row with a NULL owner (and NULL ends) counts the shards nobody holds
-- (never taken, or their lease expired). The lease token is left out: it is the fence, not
-- something an operator acts on.
-- Index: none; the table has 32 rows. Locks nothing.
SELECT CASE WHEN owner IS NOT NULL AND expires_at > now() THEN owner END AS holder,
       count(*)::int,
       min(expires_at) FILTER (WHERE owner IS NOT NULL AND expires_at > now()),
       max(expires_at) FILTER (WHERE owner IS NOT NULL AND expires_at > now())
FROM outbox_shards
GROUP BY holder
ORDER BY holder NULLS LAST
