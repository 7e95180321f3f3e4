-- The outbox's gauges: pending rows, the age of the oldest (the lowest
-- id's, through outbox_pending_idx), dead rows. Both counts read partial
-- indexes only; published rows, the bulk of the table, are never counted.
SELECT
    (SELECT count(*) FROM outbox WHERE status = 'pending'),
    coalesce((SELECT extract(epoch FROM now() - created_at)::float8
              FROM outbox WHERE status = 'pending' ORDER BY id LIMIT 1), 0),
    (SELECT count(*) FROM outbox WHERE status = 'dead')
