-- The partitions of one table, oldest generation first: generation, name,
-- rows (the planner's estimate), and whether a detach is pending (a
-- DETACH ... CONCURRENTLY that did not finish).
SELECT gen, name, est_rows, detach_pending FROM inboxd_partitions(@tbl)
