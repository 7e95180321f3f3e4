-- One page of an operator's list of rows in one view (driver.ListView, the
-- Go side names each view's .Where, .OrderAt and .Desc), filtered
-- (sql/failed_filter.sql over the whole id range), after the keyset
-- (@after_at, @after_id) in the view's order (dead and rejected rows: by
-- id alone, below @after_id), at most @limit rows, without
-- payloads. Never a count.
-- For each row: where it stands (attempts, next attempt, lease, worker,
-- times) and, for a parked row, the row of its key it waits behind (its
-- key's first row that is unfinished or dead, through inbox_key_hash_idx),
-- and whether its route is paused.
-- The keyset's first column is bounded on its own as well: the indexes
-- hold that column alone, and a row comparison does not bound their scan.
-- Index by view: retrying and waiting, inbox_received_idx (available_at,
-- id); processing, inbox_processing_idx (lease_expires_at); processed,
-- inbox_processed_at_idx (processed_at), backwards; dead and rejected,
-- inbox_failed_idx (status, id), backwards. Locks nothing.
-- Variants (driver.listVariant): .ByKey reads a key's rows through its
-- index (the views of received, processing and dead rows, which it holds);
-- .Window reads the view's first @window rows in order and filters those
-- (an error search's first try: a common text fills the page there);
-- .ErrorIndex finds an error text's rows through inbox_error_trgm_idx and
-- sorts them (its second).
SELECT i.id, i.status, i.source, i.event_id, i.event_type, i.key, i.attempts,
       i.received_at, i.updated_at, i.available_at, i.lease_expires_at, coalesce(i.locked_by, ''),
       i.processed_at, coalesce(i.last_error, ''),
       coalesce(h.head_id, 0), coalesce(h.head_status, ''), coalesce(rc.paused, false),
       {{if .OrderAt}}{{.OrderAt}}{{else}}i.updated_at{{end}} AS order_at
FROM {{if .ByKey -}}
(
    -- The key's rows through inbox_key_hash_idx (source, the key's hash,
    -- id), which holds every received, processing and dead row with a key,
    -- and no other index does (OFFSET 0: planned on their own, not beside
    -- the view's ordered index), for each source there is: a skip scan over
    -- the index's first column finds them, a probe each.
    SELECT * FROM inbox AS i
    WHERE i.key IS NOT NULL AND i.status IN ('received', 'processing', 'dead')
      AND i.source = ANY (ARRAY(
          WITH RECURSIVE s(source) AS (
              (SELECT e.source FROM inbox AS e
               WHERE e.key IS NOT NULL AND e.status IN ('received', 'processing', 'dead')
               ORDER BY e.source LIMIT 1)
              UNION ALL
              SELECT (SELECT e.source FROM inbox AS e
                      WHERE e.source > s.source AND e.key IS NOT NULL AND e.status IN ('received', 'processing', 'dead')
                      ORDER BY e.source LIMIT 1)
              FROM s WHERE s.source IS NOT NULL
          )
          SELECT s.source FROM s WHERE s.source IS NOT NULL))
      AND hashtextextended(encode(i.key, 'hex'), 0) = hashtextextended(encode(@key::bytea, 'hex'), 0)
      AND i.key = @key::bytea
    OFFSET 0
) AS i
{{- else if .Window -}}
(
    -- The view's first @window rows in its order, whatever they hold.
    SELECT * FROM inbox AS i
    WHERE {{.Where}}
    {{- template "keyset" .}}
    LIMIT @window::int
) AS i
{{- else if .ErrorIndex -}}
(
    -- The rows holding the error text, through inbox_error_trgm_idx
    -- (OFFSET 0: planned on their own, without the view's order, which
    -- would read the view's rows in order and test each).
    SELECT * FROM inbox AS i
    WHERE {{.Where}}
      AND {{template "failed_filter" .}}
    OFFSET 0
) AS i
{{- else}}inbox AS i{{end}}
LEFT JOIN LATERAL (
    SELECT e.id AS head_id, e.status AS head_status
    FROM inbox AS e
    WHERE i.available_at = '9999-12-31 00:00:00+00' AND i.key IS NOT NULL
      AND e.source = i.source
      AND hashtextextended(encode(e.key, 'hex'), 0) = hashtextextended(encode(i.key, 'hex'), 0)
      AND e.key = i.key AND e.id < i.id
      AND e.key IS NOT NULL AND e.status IN ('received', 'processing', 'dead')
    ORDER BY e.id
    LIMIT 1
) AS h ON true
LEFT JOIN route_controls AS rc ON rc.route = i.event_type AND rc.paused
WHERE {{.Where}}
  AND {{template "failed_filter" .}}
{{- template "keyset" .}}
LIMIT @limit::int
{{- define "keyset"}}
{{- if .OrderAt}}
  AND {{.OrderAt}} {{if .Desc}}<={{else}}>={{end}} @after_at::timestamptz
  AND ({{.OrderAt}}, i.id) {{if .Desc}}<{{else}}>{{end}} (@after_at::timestamptz, @after_id::bigint)
ORDER BY {{.OrderAt}}{{if .Desc}} DESC{{end}}, i.id{{if .Desc}} DESC{{end}}
{{- else}}
  AND i.id < @after_id::bigint
ORDER BY i.status DESC, i.id DESC
{{- end}}
{{- end}}
