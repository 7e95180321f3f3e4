-- The live rows (received or processing) an operator's action on a filter
-- would change, one batch in the order of the status's partial index,
-- after the keyset (@after_at, @after_id): what a dry run of cancel,
-- retry now or discard lists, without payloads. The filter:
-- sql/failed_filter.sql (its id range is (0, max]); .Eligible is the
-- action's own condition (sql/ops_eligible.sql).
-- Index: received rows, inbox_received_idx (available_at, id);
-- processing rows, inbox_processing_idx (lease_expires_at); with @ids, the
-- primary key. Locks nothing.
SELECT id, status, source, event_id, event_type, attempts, updated_at, coalesce(last_error, ''),
       {{.OrderAt}} AS order_at
FROM inbox
WHERE status = '{{.Status}}'
  AND {{template "failed_filter" .}}
  AND {{template "ops_eligible" .}}
  AND ({{.OrderAt}}, id) > (@after_at::timestamptz, @after_id::bigint)
ORDER BY {{.OrderAt}}, id
LIMIT @limit::int
