-- Delete the console sessions that expired before @before: run at each
-- sign-in, a sequential scan of a table of a few rows per sign-in of the
-- last hours.
DELETE FROM console_sessions
WHERE expires_at < @before
