-- `inboxd outbox stats`: the relays of outbox_relays, each with when it was
-- last seen and whether that is within the minute (alive).
-- Index: none; the table has a row per relay. Locks nothing.
SELECT relay, seen_at, seen_at > now() - interval '1 minute'
FROM outbox_relays
ORDER BY relay
