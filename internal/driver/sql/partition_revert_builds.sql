-- Revert: the CREATE UNIQUE INDEX CONCURRENTLY statements that build the
-- unique indexes of before the conversion on the surviving partition.
SELECT * FROM inboxd_partition_revert_builds(@tbl, @gen)
