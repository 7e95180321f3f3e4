-- Delete the dead or rejected rows that match the filter; returns the ids
-- deleted. The filter is the one of failed_match.sql.
-- Index: inbox_failed_idx (status, id), partial on dead and rejected rows;
-- with @ids, the primary key.
DELETE FROM inbox
WHERE status = @status::text AND status IN ('dead', 'rejected')
  AND (@ids::bigint[] IS NULL OR id = ANY (@ids::bigint[]))
  AND (@event_type::text = '' OR event_type = @event_type::text)
  AND (@source::text = '' OR source = @source::text)
  AND (@since::timestamptz IS NULL OR updated_at >= @since::timestamptz)
  AND (@until::timestamptz IS NULL OR updated_at < @until::timestamptz)
RETURNING id
