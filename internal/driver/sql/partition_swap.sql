-- Conversion, step 3: the table becomes partition 0 of the partitioned
-- table (one short transaction under ACCESS EXCLUSIVE; the caller sets a
-- lock_timeout and tries again).
SELECT inboxd_partition_swap(@tbl, @span_ms::bigint * interval '1 millisecond')
