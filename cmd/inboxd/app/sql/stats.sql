-- Row counts by status for the operator's stats command (not for scrapes:
-- it reads the whole table once).
SELECT status, count(*) AS rows
FROM inbox
GROUP BY status
