-- The row the next claim would take first (without locking or changing it):
-- when a claim fails because of one row's data, this is the suspect.
SELECT id
FROM inbox
WHERE status = 'received'
  AND available_at <= now()
  AND id <> ALL (@skip::bigint[])
ORDER BY available_at, id
LIMIT 1
