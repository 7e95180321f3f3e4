-- Makes a generation current: takes the inserts' fence exclusively, so the
-- caller's transaction sets a short lock_timeout first (inserts queued
-- behind the waiting switch wait no longer than that).
SELECT inboxd_partition_switch(@tbl, @gen)
