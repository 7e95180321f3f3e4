-- Delete the start bits of claims that no worker holds any more (its
-- worker died or lost its rows: every row of the claim was rescued or
-- finished): rows of inbox_starts not written for @older_ms whose token
-- no processing row carries. Run by the sweeper, at any time: a dead
-- worker's bits stay while its rows are processing, so the rescue
-- (rescue.sql) reads them first. Reads the partial index on processing
-- rows once; deletes by inbox_starts' primary key.
DELETE FROM inbox_starts AS s
WHERE s.updated_at < now() - @older_ms::bigint * interval '1 millisecond'
  AND NOT EXISTS (SELECT 1 FROM inbox AS i WHERE i.status = 'processing' AND i.lease_token = s.token)
