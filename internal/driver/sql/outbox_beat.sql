-- A relay's heartbeat: it records that it is alive, forgets relays gone for
-- @gone_ms, and counts the relays alive (seen within @alive_ms), itself
-- included, so that each takes its share of the shards. The CTEs' writes
-- are not visible to the count: the relay counts itself apart.
WITH beat AS (
    INSERT INTO outbox_relays (relay, seen_at) VALUES (@relay, now())
    ON CONFLICT (relay) DO UPDATE SET seen_at = now()
), gone AS (
    DELETE FROM outbox_relays
    WHERE relay <> @relay AND seen_at < now() - @gone_ms::bigint * interval '1 millisecond'
)
SELECT 1 + count(*)
FROM outbox_relays
WHERE relay <> @relay AND seen_at > now() - @alive_ms::bigint * interval '1 millisecond'
