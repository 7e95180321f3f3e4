-- Conversion, step 2: the CREATE UNIQUE INDEX CONCURRENTLY statements that
-- give each unique index of the table a twin with the partition key.
SELECT * FROM inboxd_partition_unique_builds(@tbl)
