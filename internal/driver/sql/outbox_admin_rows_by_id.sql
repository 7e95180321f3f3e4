-- What the outbox rows an operator named with --id are now, so that
-- `inboxd outbox requeue` and `discard` can say why one did not match
-- (published, pending, another destination, …); an id missing from the
-- result has no row.
-- Index: the primary key.
SELECT id, status, destination, event_type, created_at, coalesce(last_error, '')
FROM outbox
WHERE id = ANY (@ids::bigint[])
