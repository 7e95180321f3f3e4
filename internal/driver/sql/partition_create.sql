-- Creates and attaches the partition of one generation (migration 016);
-- false when it exists.
SELECT inboxd_partition_create(@tbl, @gen)
