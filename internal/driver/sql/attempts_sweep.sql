-- Delete the history of rows that are gone (retention deleted them, or a
-- discard), one batch of the oldest entries after @after (finished_at; the
-- caller's cursor) and finished over an hour ago: entries whose row
-- exists are kept (a dead row keeps its history as long as it stays).
-- Returns the batch's last finished_at (NULL: none left after @after).
-- Index: inbox_attempts_finished_idx for the batch; the inbox's primary
-- key for each entry's row; the primary key for the delete.
WITH c AS (
    SELECT row_id, attempt, finished_at
    FROM inbox_attempts
    WHERE finished_at > @after::timestamptz AND finished_at < now() - interval '1 hour'
    ORDER BY finished_at
    LIMIT @limit::int
), gone AS (
    DELETE FROM inbox_attempts AS h
    USING c
    WHERE h.row_id = c.row_id AND h.attempt = c.attempt
      AND NOT EXISTS (SELECT 1 FROM inbox AS i WHERE i.id = c.row_id)
)
SELECT max(finished_at) FROM c
