-- End a console session (a sign-out): its row, by the primary key, stays
-- until it expires, marked ended, so that its cookie is refused.
UPDATE console_sessions
SET ended_at = now()
WHERE id_hash = @id_hash
  AND ended_at IS NULL
