{{/* ops_batch: the batch CTE of the actions on live rows (cancel, retry
now, discard of received rows): up to @limit rows of .Status that the
filter (sql/failed_filter.sql) and the action (sql/ops_eligible.sql) take,
in the order of the status's partial index (.OrderAt), locked FOR UPDATE
SKIP LOCKED: a row another statement holds is left for a later batch. The
rows leave the filter's set as they change, so the caller repeats the
statement until it changes nothing. */}}
{{- define "ops_batch" -}}
batch AS (
    SELECT id
    FROM inbox
    WHERE status = '{{.Status}}'
      AND {{template "failed_filter" .}}
      AND {{template "ops_eligible" .}}
    ORDER BY {{.OrderAt}}, id
    LIMIT @limit::int
    FOR UPDATE SKIP LOCKED
)
{{- end -}}
