-- One outbox row by id, every column (whatever the schema version adds),
-- for `inboxd outbox show`.
-- Index: the primary key.
SELECT *
FROM outbox
WHERE id = @id::bigint
