{{/* failed_filter: the filter of requeue and discard over dead or rejected
rows, within one range of ids (@after, @upto] (see failed_range.sql): @ids
bigint[] (NULL = any), @event_type and @source ('' = any), @since and
@until timestamptz (NULL = unbounded), @error ('' = any: last_error must
contain it, case-insensitively). Each statement that uses it
(failed_match.sql, requeue.sql, discard.sql, and the outbox's
outbox_admin_*.sql) states the status it reads first, so that the partial
index on the failed rows serves the range.
The data names the table's columns (driver.filterColumns): .Source, the
inbox's source or the outbox's destination; .Time, the column --since and
--until bound (the inbox's updated_at, the outbox's created_at); .Key, when
set, the column @key bytea (NULL = any) must equal (the inbox's key);
.NoRange leaves the id range out (the lists and the actions on live rows,
which read another index: with the range in, a generic plan, which pgx's
prepared statements get after five runs, estimated one row for it and
scanned the primary key); .ErrorIndex matches @error (not '') in the form
the index of migration 21 serves (inbox_error_trgm_idx, pg_trgm on
lower(last_error), rows with an error only): the same rows as strpos, the
text's %, _ and \ taken as they are. */}}
{{- define "failed_filter" -}}
{{if .NoRange}}true{{else}}id > @after::bigint AND id <= @upto::bigint{{end}}
  AND (@ids::bigint[] IS NULL OR id = ANY (@ids::bigint[]))
  AND (@event_type::text = '' OR event_type = @event_type::text)
  AND (@source::text = '' OR {{.Source}} = @source::text)
  AND (@since::timestamptz IS NULL OR {{.Time}} >= @since::timestamptz)
  AND (@until::timestamptz IS NULL OR {{.Time}} < @until::timestamptz)
{{- if .ErrorIndex}}
  AND last_error IS NOT NULL
  AND lower(last_error) LIKE '%' || replace(replace(replace(lower(@error::text), '\', '\\'), '%', '\%'), '_', '\_') || '%'
{{- else}}
  AND (@error::text = '' OR strpos(lower(coalesce(last_error, '')), lower(@error::text)) > 0)
{{- end}}
{{- if .Key}}
  AND (@key::bytea IS NULL OR {{.Key}} = @key::bytea)
{{- end}}
{{- end -}}
