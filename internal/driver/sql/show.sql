-- One row, every column (whatever the schema version adds), for `inboxd
-- show`.
-- Index: the primary key.
SELECT *
FROM inbox
WHERE id = @id
