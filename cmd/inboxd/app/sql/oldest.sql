-- Age of the oldest due received row, through the partial index.
SELECT coalesce(extract(epoch FROM now() - min(available_at)), 0)::float8
FROM inbox
WHERE status = 'received' AND available_at <= now()
