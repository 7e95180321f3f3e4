-- The console's list of blocked keys: the keys of ordered routes whose
-- dead rows hold their key back (on_dead: block, @blocking_types), one
-- entry per (source, key) with its head (the key's oldest dead row), as
-- sql/blocked_keys.sql counts them for inboxd_ordered_blocked_keys: the
-- list is as long as the gauge says. Newest head first below @before
-- (keyset paging on the head's id), at most @limit, each with how many
-- live rows of its key wait behind the head (counted up to 1,000).
-- Index: inbox_failed_idx (status, id), partial on dead and rejected rows,
-- for the heads; inbox_key_hash_idx for the rows behind each. Locks
-- nothing.
SELECT h.id, h.source, h.event_id, h.event_type, encode(h.key, 'escape'), h.updated_at,
       (SELECT count(*) FROM (
            SELECT 1 FROM inbox i
            WHERE i.source = h.source
              AND hashtextextended(encode(i.key, 'hex'), 0) = hashtextextended(encode(h.key, 'hex'), 0)
              AND i.key = h.key AND i.id > h.id AND i.key IS NOT NULL
              AND i.status IN ('received', 'processing', 'dead')
            LIMIT 1000) AS behind) AS held
FROM (SELECT DISTINCT ON (d.source, d.key) d.id, d.source, d.event_id, d.event_type, d.key, d.updated_at
      FROM inbox d
      WHERE d.status = 'dead' AND d.status IN ('dead', 'rejected') AND d.key IS NOT NULL
        AND d.event_type = ANY (@blocking_types::text[])
      ORDER BY d.source, d.key, d.id) AS h
WHERE h.id < @before::bigint
ORDER BY h.id DESC
LIMIT @limit::int
