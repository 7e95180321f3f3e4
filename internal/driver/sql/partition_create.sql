-- Creates and attaches the partition of one generation (migration 019);
-- false when it exists.
SELECT inboxd_partition_create(@tbl, @gen)
