-- The console session of a request's cookie, unless it was ended or was
-- signed in with another token: one probe of the primary key, on every
-- page and action. Whether it has expired is the caller's to say (its
-- clock decides, as it decided expires_at).
SELECT operator, expires_at
FROM console_sessions
WHERE id_hash = @id_hash
  AND token_tag = @token_tag
  AND ended_at IS NULL
