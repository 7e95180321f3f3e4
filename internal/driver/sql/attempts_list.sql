-- A row's history: its recorded attempts, oldest first (at most 25).
-- Index: the primary key (row_id, attempt). Locks nothing.
SELECT attempt, started_at, finished_at, worker, outcome, coalesce(error, '')
FROM inbox_attempts
WHERE row_id = @row_id::bigint
ORDER BY attempt
