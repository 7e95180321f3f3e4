-- Delay the rows a rescue has just returned to received after a started
-- attempt (sql/rescue.sql), each by its route's backoff for that attempt,
-- as a failed attempt's retry would be: the row may be the one whose
-- handler killed the process, and must not sort ahead of the rows rescued
-- with it that never ran. Runs in the rescue's transaction, on rows it
-- has locked already; reaches them by primary key.
UPDATE inbox AS i
SET available_at = now() + d.delay_ms * interval '1 millisecond'
FROM unnest(@ids::bigint[], @delays_ms::bigint[]) AS d(id, delay_ms)
WHERE i.id = d.id
  AND i.status = 'received'
