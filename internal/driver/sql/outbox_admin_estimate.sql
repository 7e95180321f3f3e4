-- The planner's estimate of the outbox's rows (pg_class.reltuples, as of
-- the last VACUUM or ANALYZE; -1 before the first), from which `inboxd
-- outbox stats` estimates the published rows: counting them would read
-- most of the table, whose published rows retention keeps for
-- INBOXD_OUTBOX_RETENTION. NULL when there is no outbox table.
-- Index: none; one row of pg_class.
SELECT reltuples::float8
FROM pg_class
WHERE oid = to_regclass('outbox')
