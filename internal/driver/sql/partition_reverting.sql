-- Revert, first step: no more switches; the next generation made current
-- is the surviving partition's.
UPDATE inboxd_partitioned SET reverting = true WHERE tbl = @tbl
