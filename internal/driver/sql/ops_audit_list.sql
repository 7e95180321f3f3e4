-- One page of the audit trail, newest first, below the id @before
-- (keyset), at most @limit entries; @operator and @action ('' = any)
-- narrow it, @since (NULL = unbounded) bounds it.
-- Index: the primary key, backwards. Locks nothing.
SELECT id, at, operator, origin, action, dry_run, filter::text, coalesce(row_ids, '{}'), row_count, detail,
       coalesce(error, '')
FROM ops_audit
WHERE id < @before::bigint
  AND (@operator::text = '' OR operator = @operator::text)
  AND (@action::text = '' OR action = @action::text)
  AND (@since::timestamptz IS NULL OR at >= @since::timestamptz)
ORDER BY id DESC
LIMIT @limit::int
