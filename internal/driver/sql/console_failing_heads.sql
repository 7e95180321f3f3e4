-- The console's keys of ordered routes (@ordered_types) held back by a
-- failing head: a received row that has failed at least once (attempts >
-- 0, waiting for its next attempt), the oldest live row of its (source,
-- key), with live rows of the key waiting behind it. Not counted by
-- inboxd_ordered_blocked_keys (the head may yet succeed); listed next to
-- the dead heads. Soonest next attempt first, at most @limit, each with
-- how many rows wait behind it (counted up to 1,000).
-- Index: inbox_received_idx (available_at, id), partial on received rows,
-- in its order (so the limit stops the scan); inbox_key_hash_idx for the
-- rows before and behind each. Locks nothing.
SELECT h.id, h.source, h.event_id, h.event_type, encode(h.key, 'escape'), h.attempts,
       coalesce(h.last_error, ''), h.available_at, behind.n
FROM inbox h
CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM inbox i
        WHERE i.source = h.source
          AND hashtextextended(encode(i.key, 'hex'), 0) = hashtextextended(encode(h.key, 'hex'), 0)
          AND i.key = h.key AND i.id > h.id AND i.key IS NOT NULL
          AND i.status IN ('received', 'processing', 'dead')
        LIMIT 1000) AS b) AS behind
WHERE h.status = 'received' AND h.attempts > 0 AND h.key IS NOT NULL
  AND h.event_type = ANY (@ordered_types::text[])
  AND NOT EXISTS (
        SELECT 1 FROM inbox e
        WHERE e.source = h.source
          AND hashtextextended(encode(e.key, 'hex'), 0) = hashtextextended(encode(h.key, 'hex'), 0)
          AND e.key = h.key AND e.id < h.id AND e.key IS NOT NULL
          AND e.status IN ('received', 'processing', 'dead'))
  AND behind.n > 0
ORDER BY h.available_at, h.id
LIMIT @limit::int
