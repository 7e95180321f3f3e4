-- Carries one batch of the rows a drop must not reach from one partition
-- into the current one (migration 019): how many it moved.
SELECT inboxd_partition_carry(@tbl, @gen, @all, @batch)
