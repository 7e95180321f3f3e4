-- The console's list of blocked ordered keys: dead rows with a key, newest
-- first below @before (keyset paging), at most @limit, each with how many
-- live rows of its key wait behind it (counted up to 1,000).
-- Index: inbox_failed_idx (status, id), partial on dead and rejected rows,
-- read backwards; inbox_key_hash_idx for the rows behind each. Locks
-- nothing.
SELECT d.id, d.source, d.event_id, d.event_type, encode(d.key, 'escape'), d.updated_at,
       (SELECT count(*) FROM (
            SELECT 1 FROM inbox i
            WHERE i.source = d.source
              AND hashtextextended(encode(i.key, 'hex'), 0) = hashtextextended(encode(d.key, 'hex'), 0)
              AND i.key = d.key AND i.id > d.id AND i.key IS NOT NULL
              AND i.status IN ('received', 'processing', 'dead')
            LIMIT 1000) AS behind) AS held
FROM inbox d
WHERE d.status = 'dead' AND d.status IN ('dead', 'rejected') AND d.key IS NOT NULL AND d.id < @before::bigint
ORDER BY d.status DESC, d.id DESC
LIMIT @limit::int
