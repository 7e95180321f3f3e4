-- The rows that hold @event_id, in any source, for the console's search:
-- a "loose index scan" of inbox_source_event_id_key (source, event_id)
-- finds each distinct source with one index probe (the recursive CTE
-- steps from one source to the next greater one), then one probe per
-- source looks up (source, @event_id). Never a sequential scan, however
-- many rows the table holds; the cost grows with the number of sources.
-- Locks nothing.
WITH RECURSIVE sources AS (
    (SELECT source FROM inbox ORDER BY source LIMIT 1)
    UNION ALL
    SELECT (SELECT i.source FROM inbox i WHERE i.source > s.source ORDER BY i.source LIMIT 1)
    FROM sources s
    WHERE s.source IS NOT NULL
)
SELECT i.id, i.status, i.source, i.event_id, i.event_type, i.attempts, i.updated_at, coalesce(i.last_error, '')
FROM sources s
JOIN inbox i ON i.source = s.source AND i.event_id = @event_id::text
WHERE s.source IS NOT NULL
ORDER BY i.id
LIMIT 100
