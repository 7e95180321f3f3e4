{{/* failed_filter: the filter of requeue and discard over dead or rejected
rows, within one range of ids (@after, @upto] (see failed_range.sql): @ids
bigint[] (NULL = any), @event_type and @source ('' = any), @since and
@until timestamptz on updated_at (NULL = unbounded). Each statement that
uses it (failed_match.sql, requeue.sql, discard.sql) states the status it
reads first, so that inbox_failed_idx (status, id) serves the range. */}}
{{- define "failed_filter" -}}
id > @after::bigint AND id <= @upto::bigint
  AND (@ids::bigint[] IS NULL OR id = ANY (@ids::bigint[]))
  AND (@event_type::text = '' OR event_type = @event_type::text)
  AND (@source::text = '' OR source = @source::text)
  AND (@since::timestamptz IS NULL OR updated_at >= @since::timestamptz)
  AND (@until::timestamptz IS NULL OR updated_at < @until::timestamptz)
{{- end -}}
