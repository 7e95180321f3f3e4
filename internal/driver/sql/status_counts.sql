-- How many rows each status has, processed rows included: for the demo and
-- the test suites, on small tables. The workers' gauges read sql/stats.sql
-- instead, which walks the partial indexes of the live statuses only.
-- Index: none; reads the whole table.
SELECT status, count(*)
FROM inbox
GROUP BY status
