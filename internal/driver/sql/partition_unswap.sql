-- Revert, last step: the surviving partition becomes the table again (one
-- short transaction under ACCESS EXCLUSIVE; the caller sets a lock_timeout
-- and tries again).
SELECT inboxd_partition_unswap(@tbl, @gen)
