-- The rows the dead row @id holds back on its ordering key: the live rows
-- of the same (source, key) after it, oldest first, at most @limit.
-- Index: inbox_key_hash_idx (source, key hash, id), partial on received,
-- processing and dead rows with a key; the key itself is compared too, so
-- a hash collision never lists another key's row. Locks nothing.
SELECT i.id, i.status, i.source, i.event_id, i.event_type, i.attempts, i.updated_at, coalesce(i.last_error, '')
FROM inbox d
JOIN inbox i
  ON i.source = d.source
 AND hashtextextended(encode(i.key, 'hex'), 0) = hashtextextended(encode(d.key, 'hex'), 0)
 AND i.key = d.key
 AND i.id > d.id
 AND i.key IS NOT NULL
 AND i.status IN ('received', 'processing', 'dead')
WHERE d.id = @id::bigint AND d.key IS NOT NULL
ORDER BY i.id
LIMIT @limit::int
