-- Conversion, step 1: the partition key column and partition 0's
-- constraint, NOT VALID (a short ACCESS EXCLUSIVE lock, no rewrite).
SELECT inboxd_partition_prepare(@tbl)
