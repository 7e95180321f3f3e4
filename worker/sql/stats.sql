-- Live-status counts and the age of the oldest due row, read through the
-- partial indexes only (never a count over the whole table).
SELECT
    (SELECT count(*) FROM inbox WHERE status = 'received')   AS received,
    (SELECT count(*) FROM inbox WHERE status = 'processing') AS processing,
    coalesce(extract(epoch FROM now() - (
        SELECT min(available_at) FROM inbox
        WHERE status = 'received' AND available_at <= now()
    )), 0)::float8 AS oldest_ready_age_seconds
