-- What the rows an operator named with --id are now, so that requeue and
-- discard can say why one did not match (processed, received, another type,
-- …); an id missing from the result has no row.
-- Index: the primary key.
SELECT id, status, source, event_type, updated_at
FROM inbox
WHERE id = ANY (@ids::bigint[])
