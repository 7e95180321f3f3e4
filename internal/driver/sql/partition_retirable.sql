-- Whether every row of one partition may go (all finished, longer ago than
-- the retention); reads the partition's partial indexes and its
-- processed_at (published_at) index only.
SELECT inboxd_partition_retirable(@tbl, @gen, @retention_ms::bigint * interval '1 millisecond')
